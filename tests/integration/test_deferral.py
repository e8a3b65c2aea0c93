"""A chunk whose source asks it to wait longer than ``source.defer_after_s`` (a Retry-After, the connection's paused
rate limit) stops after its last finished batch and defers; its trigger waits for the connection's shared rate
limit to open and the chunk resumes at the batch it stopped at. Run as ``airflow dags test`` runs it (its trigger
in line), against the demo source, PostgreSQL and Kafka with exactly-once delivery: every record reaches the topic
once, the run records no error, and the chunk's result says how often it deferred."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from crawler_ops.factory.crawl import build_crawl_dag
from crawler_ops.operators import CRAWL_CHUNK
from tests.support import duplicates, make_task, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
TOTAL = 1_000


def chunk_results(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """What the run's ``crawl_chunk`` instances returned, from Airflow's metadata database."""
    from airflow.utils.session import create_session

    statement = text(
        "SELECT value FROM xcom WHERE dag_id = :dag AND run_id = :run AND task_id = :task AND key = 'return_value' "
        "ORDER BY map_index"
    )
    with create_session() as session:
        rows = session.execute(statement, {"dag": dag_id, "run": run_id, "task": CRAWL_CHUNK}).scalars().all()
    return [dict(row) for row in rows]


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_a_chunk_deferred_by_long_retry_afters_resumes_at_its_batch_and_publishes_each_record_once(
    source, kafka_bootstrap, pg_uri, unique_id, use_config, delivery
):
    source.create(unique_id, total=TOTAL, ref=REF, in_window_share=1.0)
    # Every 6th page request: 429 with Retry-After: 3, longer than defer_after_s.
    source.faults(unique_id, rate_limit_every=6, retry_after_s=3)
    cfg = make_task(
        unique_id,
        max_chunks=1,
        kafka={"delivery": delivery},
        source={"defer_after_s": 1, "max_retries": 8, "concurrency": 2},
    )
    use_config(cfg, "tasks")

    run = build_crawl_dag(cfg).test(logical_date=REF, run_conf={})

    assert str(run.state) == "success"
    (result,) = chunk_results(cfg.dag_id, run.run_id)
    assert result["deferrals"] >= 1, "the chunk gave its worker back while its source was paused"
    assert (result["batches_done"], result["fetched"]) == (TOTAL // 100, TOTAL), "the legs add up to the chunk"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    truth = source.truth(unique_id, REF, days=7)
    assert sorted(m.key for m in messages) == sorted(truth["in_window_ids"]) and not duplicates(messages)
    record = run_record(pg_uri, unique_id)
    assert (record["status"], record["errors"]) == ("success", []), "a deferral is no failed attempt of a batch"
    assert watermark(pg_uri, unique_id) == TOTAL
