"""Poison batches on the real stack: parked after ``max_attempts`` failures, holding the watermark, shown in the
status view, passed only when an operator skips them (a run param or the CLI), which is recorded."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.support import cli, make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def row_of(pg_uri: str, task_id: str, lo: int) -> tuple[int, int]:
    [(status, attempts)] = query(
        pg_uri, "SELECT status, attempts FROM crawler_ops.batch_status WHERE task_name = %s AND id = %s", task_id, lo
    )
    return status, attempts


def batch_errors(pg_uri: str, task_id: str) -> list[tuple[int, int, str]]:
    return query(
        pg_uri,
        "SELECT source_offset, offset_end, reason FROM crawler_ops.crawl_error WHERE task_id = %s AND kind = 'batch' "
        "ORDER BY id",
        task_id,
    )


def published_offsets(kafka_bootstrap: str, topic: str) -> set[int]:
    return {int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, topic)}


def test_a_batch_that_always_fails_is_parked_holds_the_watermark_and_passes_only_when_skipped(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag, use_config
):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    source.faults(unique_id, fail_offsets=[200], fail_status=500)  # the page [200, 300) always fails
    cfg = make_task(unique_id, max_attempts=2, max_chunks=5, min_batches_per_chunk=1)

    assert run_dag(cfg, REF) == "failed"
    assert row_of(pg_uri, unique_id, 200) == (0, 1), "pending again after its first failure"
    assert run_dag(cfg, REF) == "failed"

    assert row_of(pg_uri, unique_id, 200) == (3, 2), "parked at its second failure"
    parking = run_record(pg_uri, unique_id)
    assert any(
        "batch [200, 300) is parked after 2 failed attempts" in e and "skip_parked" in e for e in parking["errors"]
    )
    assert any((lo, hi) == (200, 300) and "is parked" in reason for lo, hi, reason in batch_errors(pg_uri, unique_id))
    assert watermark(pg_uri, unique_id) == 200

    # Newer records still flow; the parked page is not fetched again and the watermark stays below it.
    source.append(unique_id, 100)
    source.clear_requests(unique_id)
    assert run_dag(cfg, REF) == "success"
    assert {r["offset"] for r in source.page_requests(unique_id)} == {500}
    assert watermark(pg_uri, unique_id) == 200
    [note] = run_record(pg_uri, unique_id)["notes"]
    assert "batch [200, 300) is parked" in note
    use_config(cfg)
    status = cli("status", "--task", unique_id, "--json", "--no-live")
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)["tasks"]
    assert len(row["parked"]) == 1 and row["parked"][0].startswith("[200, 300) after 2 failed attempts")

    assert run_dag(cfg, REF, {"skip_parked": True}) == "success"

    assert watermark(pg_uri, unique_id) == 600
    assert query(pg_uri, "SELECT id FROM crawler_ops.batch_status WHERE task_name = %s AND status = 3", unique_id) == []
    skipped = run_record(pg_uri, unique_id)
    assert any("skipped by the operator (skip_parked)" in e for e in skipped["errors"])
    assert published_offsets(kafka_bootstrap, cfg.kafka.topic) == set(range(600)) - set(range(200, 300))


def test_the_cli_skips_one_parked_batch_and_names_a_wrong_offset(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag, use_config
):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_attempts=1)
    assert run_dag(cfg, REF) == "success"
    source.faults(unique_id, fail_offsets=[200], fail_status=500)  # the next page, [200, 300), always fails
    source.append(unique_id, 100)
    assert run_dag(cfg, REF) == "failed"
    assert row_of(pg_uri, unique_id, 200) == (3, 1)
    use_config(cfg)

    wrong = cli("skip-batch", "--task", unique_id, "--offset", "100")
    assert wrong.returncode == 1 and "no parked batch starting at offset 100" in wrong.stderr
    skipped = cli("skip-batch", "--task", unique_id, "--offset", "200")

    assert skipped.returncode == 0, skipped.stderr
    assert "skipped [200, 300)" in skipped.stdout
    assert any(
        (lo, hi) == (200, 300) and "skipped by the operator (skip-batch)" in reason
        for lo, hi, reason in batch_errors(pg_uri, unique_id)
    )
    assert watermark(pg_uri, unique_id) == 200
    assert run_dag(cfg, REF) == "success"
    assert watermark(pg_uri, unique_id) == 300
    assert published_offsets(kafka_bootstrap, cfg.kafka.topic) == set(range(200))


def test_a_record_larger_than_kafka_accepts_is_dead_lettered_with_its_size_and_its_batch_finishes(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    from tests.integration.crawl_transforms import oversized

    source.create(unique_id, total=400, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, transform="tests.integration.crawl_transforms.inflate_some")
    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])
    big = {key for key in truth if oversized(key)}
    assert big, "the data set has records the transform blows up"

    assert run_dag(cfg, REF) == "success"

    assert {m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)} == truth - big
    assert watermark(pg_uri, unique_id) == 400
    rows = query(
        pg_uri,
        "SELECT reason, record->>'id' FROM crawler_ops.crawl_error WHERE task_id = %s AND kind = 'record'",
        unique_id,
    )
    assert {key for _, key in rows} == big
    assert all("bytes is larger than kafka.max_message_bytes (1000000)" in reason for reason, _ in rows)
