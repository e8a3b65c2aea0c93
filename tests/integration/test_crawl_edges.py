"""Edges of planning and committing on the real stack: an empty source, a run with nothing to do, a source that
shrinks under a pending batch."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.support import make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def last_start_offset(pg_uri: str, task_id: str) -> int | None:
    rows = query(pg_uri, "SELECT last_start_offset FROM crawler_ops.progress WHERE task_id = %s", task_id)
    return rows[0][0] if rows else None


def test_a_first_run_on_an_empty_source_leaves_the_task_in_first_crawl_mode(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=0, ref=REF)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF) == "success"

    assert watermark(pg_uri, unique_id) is None
    # The source gets its history later: the next run is still a first crawl and searches for the window.
    source.create(unique_id, total=3_000, ref=REF, in_window_share=0.1)
    source.clear_requests(unique_id)
    assert run_dag(cfg, REF) == "success"

    assert run_record(pg_uri, unique_id)["mode"] == "first"
    truth = source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)
    assert sorted(m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)) == sorted(truth["in_window_ids"])
    pages = source.page_requests(unique_id)
    assert len(pages) <= 3 + cfg.max_expired_batches + 1, "the window's pages and the margin, not all 30"
    assert watermark(pg_uri, unique_id) == 3_000


def test_a_run_that_plans_nothing_keeps_the_last_start_offset(source, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    assert last_start_offset(pg_uri, unique_id) == 400

    assert run_dag(cfg, REF) == "success"

    assert run_record(pg_uri, unique_id)["planned"] == 0
    assert last_start_offset(pg_uri, unique_id) == 400
    source.append(unique_id, 100)
    assert run_dag(cfg, REF) == "success"
    assert last_start_offset(pg_uri, unique_id) == 500


def test_a_pending_batch_straddling_a_shrunken_total_is_replanned_up_to_the_total(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, fail_offsets=[900], fail_status=500)
    cfg = make_task(unique_id, max_chunks=10, min_batches_per_chunk=1)  # a chunk per batch: only the top one fails
    assert run_dag(cfg, REF) == "failed"
    assert watermark(pg_uri, unique_id) == 900, "[900, 1000) failed and is pending"
    source.clear_faults(unique_id)
    source.truncate(unique_id, 950)

    assert run_dag(cfg, REF) == "success"

    assert watermark(pg_uri, unique_id) == 950
    offsets = sorted(int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, cfg.kafka.topic))
    assert offsets == list(range(950))
    source.append(unique_id, 50)
    assert run_dag(cfg, REF) == "success"
    offsets = sorted(int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, cfg.kafka.topic))
    assert offsets == list(range(1_000)), "the offsets the clipped batch gave up are crawled when they come back"
    assert watermark(pg_uri, unique_id) == 1_000
