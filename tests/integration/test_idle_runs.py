"""A run whose plan finds nothing new ends at its plan: the plan commits it in its own process and skips the steps
after it (no task process for crawl_chunk, commit or announce), the run history records the poll, the watermark
and the topic stay as they were; the next run that finds records runs every step as usual."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from crawler_ops.factory.crawl import build_crawl_dag
from crawler_ops.operators import ANNOUNCE, COMMIT, CRAWL_CHUNK, PLAN
from tests.support import make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def states_of(dagrun) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}


def test_a_poll_that_finds_nothing_ends_at_its_plan_and_the_next_new_record_runs_every_step(
    source, kafka_bootstrap, pg_uri, unique_id, use_config
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    use_config(cfg, "tasks")
    dag = build_crawl_dag(cfg)
    first = dag.test(logical_date=REF, run_conf={})
    assert str(first.state) == "success", states_of(first)
    assert watermark(pg_uri, unique_id) == 300

    idle = dag.test(logical_date=REF + timedelta(minutes=2), run_conf={})

    assert str(idle.state) == "success", states_of(idle)
    assert states_of(idle) == {PLAN: "success", CRAWL_CHUNK: "skipped", COMMIT: "skipped", ANNOUNCE: "skipped"}
    record = run_record(pg_uri, unique_id)
    assert (record["run_id"], record["status"], record["planned"]) == (idle.run_id, "success", 0)
    assert record["finished_at"] is not None, "the plan closed the run record"
    assert watermark(pg_uri, unique_id) == 300
    runs = query(pg_uri, "SELECT count(*) FROM crawler_ops.crawl_run WHERE task_id = %s", unique_id)
    assert runs == [(2,)], "the poll is in the run history"

    source.append(unique_id, 40)
    third = dag.test(logical_date=REF + timedelta(minutes=4), run_conf={})

    assert states_of(third) == {PLAN: "success", CRAWL_CHUNK: "success", COMMIT: "success", ANNOUNCE: "success"}
    assert watermark(pg_uri, unique_id) == 340
    keys = [m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)]
    assert len(keys) == len(set(keys)) == 340
