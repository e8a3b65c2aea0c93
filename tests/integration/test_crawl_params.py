"""Run parameters through dag.test(): dry_run, reset, replay, max_batches, filter_days."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from tests.support import create_topic, make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
TOLERANCE_S = 24 * 3600


def status_rows(pg_uri: str, task_id: str) -> list[tuple[int, int, int]]:
    return query(
        pg_uri, "SELECT id, hi, status FROM crawler_ops.batch_status WHERE task_name = %s ORDER BY id", task_id
    )


def test_dry_run_fetches_but_publishes_and_commits_nothing(source, kafka_bootstrap, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=700, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    create_topic(kafka_bootstrap, cfg.kafka.topic)  # a dry run creates no topic: read an existing one

    assert run_dag(cfg, REF, {"dry_run": True}) == "success"

    assert len(source.page_requests(unique_id)) == 7
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []
    assert watermark(pg_uri, unique_id) is None
    assert query(pg_uri, "SELECT count(*) FROM crawler_ops.crawl_run WHERE task_id = %s", unique_id) == [(0,)]
    assert status_rows(pg_uri, unique_id) == []


def test_reset_recrawls_from_scratch(source, kafka_bootstrap, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    source.clear_requests(unique_id)

    assert run_dag(cfg, REF, {"reset": True}) == "success"

    assert sorted(r["offset"] for r in source.page_requests(unique_id)) == [0, 100, 200, 300, 400]
    counts = Counter(m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic))
    assert len(counts) == 500 and set(counts.values()) == {2}
    assert watermark(pg_uri, unique_id) == 500
    assert run_record(pg_uri, unique_id)["mode"] == "first"


def test_replay_republishes_a_range_and_leaves_watermark_and_status_rows_alone(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=0.3)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    before_rows = status_rows(pg_uri, unique_id)
    source.clear_requests(unique_id)

    # Offsets 0..249 are all older than 7 days; a 400-day window takes them all.
    assert run_dag(cfg, REF, {"replay_from": 0, "replay_to": 250, "filter_days": 400}) == "success"

    replay = run_record(pg_uri, unique_id)
    assert replay["mode"] == "replay"
    replayed = [m for m in read_topic(kafka_bootstrap, cfg.kafka.topic) if m.headers["run_id"] == replay["run_id"]]
    assert sorted(int(m.headers["source_offset"]) for m in replayed) == list(range(250))
    assert sorted(r["offset"] for r in source.page_requests(unique_id)) == [0, 50, 150]
    assert watermark(pg_uri, unique_id) == 1_000
    assert status_rows(pg_uri, unique_id) == before_rows


def test_max_batches_crawls_the_newest_batches_and_the_next_run_finishes(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF, {"max_batches": 3}) == "success"

    assert sorted(r["offset"] for r in source.page_requests(unique_id)) == [700, 800, 900]
    assert watermark(pg_uri, unique_id) == 0
    source.clear_requests(unique_id)
    assert run_dag(cfg, REF) == "success"
    assert sorted(r["offset"] for r in source.page_requests(unique_id)) == list(range(0, 700, 100))
    assert watermark(pg_uri, unique_id) == 1_000
    assert len({m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}) == 1_000


def test_filter_days_override_widens_the_window(source, kafka_bootstrap, unique_id, run_dag):
    source.create(unique_id, total=600, ref=REF, in_window_share=0.2, history_days=30)
    # Two tasks crawl the same source data: one with the configured 7 days, one with a 60-day override.
    baseline = make_task(f"{unique_id}_7d", source={"task": unique_id})
    widened = make_task(f"{unique_id}_60d", source={"task": unique_id})

    assert run_dag(baseline, REF) == "success"
    assert run_dag(widened, REF, {"filter_days": 60}) == "success"

    week = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"]
    sixty_days = source.truth(unique_id, REF, days=60, tolerance_s=TOLERANCE_S)["in_window_ids"]
    assert len(week) == 120 and len(sixty_days) == 600
    assert sorted(m.key for m in read_topic(kafka_bootstrap, baseline.kafka.topic)) == sorted(week)
    assert sorted(m.key for m in read_topic(kafka_bootstrap, widened.kafka.topic)) == sorted(sixty_days)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"replay_from": 10}, "give both replay_from and replay_to"),
        ({"replay_from": 50, "replay_to": 50}, "is empty or negative"),
        ({"reset": True, "replay_from": 0, "replay_to": 10}, "cannot be combined"),
    ],
    ids=["replay-half-given", "replay-empty", "replay-with-reset"],
)
def test_inconsistent_params_fail_without_touching_anything(source, pg_uri, unique_id, conf, message, run_dag):
    from crawler_ops.crawl.run import RunParams
    from crawler_ops.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        RunParams.from_params(conf, unique_id)
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    assert run_dag(make_task(unique_id), REF, conf) == "failed"
    assert source.page_requests(unique_id) == []
    assert watermark(pg_uri, unique_id) is None
