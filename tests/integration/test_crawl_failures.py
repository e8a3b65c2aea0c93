"""Crashes and bad input: nothing lost, at most one batch duplicated, the watermark consistent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawler_ops.chunk import crawl_chunk
from crawler_ops.commit import commit_run
from crawler_ops.errors import DeliveryError, StatusTableError
from crawler_ops.plan import plan_run
from crawler_ops.run import RunContext, RunParams
from tests.support import duplicates, make_task, query, read_topic, run_dag, run_record, watermark

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REF = datetime(2026, 11, 1, tzinfo=UTC)
TOLERANCE_S = 24 * 3600


def done_batches(pg_uri: str, task_id: str) -> int:
    return query(pg_uri, "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 2", task_id)[
        0
    ][0]


def test_sigkill_mid_chunk_then_retry_loses_nothing_and_duplicates_at_most_one_batch(
    source, kafka_bootstrap, pg_uri, unique_id
):
    source.create(unique_id, total=3_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, latency_ms=60)
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 2})
    run = RunContext(cfg=cfg, run_id="crash-run", ref=REF, params=RunParams())
    chunks = plan_run(run)
    assert len(chunks) == 1
    spec = {
        "config": cfg.model_dump(mode="json"),
        "run_id": run.run_id,
        "ref": REF.isoformat(),
        "map_index": 0,
        "try_number": 1,
        "payload": chunks[0],
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    worker = subprocess.Popen(
        [sys.executable, str(REPO / "tests/integration/chunk_runner.py"), json.dumps(spec)], env=env, cwd=REPO
    )
    deadline = time.monotonic() + 120
    while done_batches(pg_uri, unique_id) < 8:
        assert worker.poll() is None, "the chunk finished before it could be killed"
        assert time.monotonic() < deadline, "the chunk made no progress"
        time.sleep(0.02)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    killed_at = done_batches(pg_uri, unique_id)
    assert 8 <= killed_at < 30
    source.clear_faults(unique_id)

    # Airflow's retry of the killed task instance: same run, same map index, next try.
    result = crawl_chunk(replace(run, map_index=0, try_number=2), chunks[0])
    summary = commit_run(run, chunks, [result])

    assert summary.status == "success"
    assert result["batches_skipped"] == killed_at  # done batches were not fetched again
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert {m.key for m in messages} == set(truth["in_window_ids"])
    dup_offsets = sorted({int(m.headers["source_offset"]) for m in messages if m.key in duplicates(messages)})
    if dup_offsets:  # at most the one batch that was in flight
        assert dup_offsets[-1] - dup_offsets[0] < cfg.batch_size
        assert dup_offsets[0] // cfg.batch_size == dup_offsets[-1] // cfg.batch_size
    assert watermark(pg_uri, unique_id) == 3_000


def test_persistently_failing_page_keeps_the_watermark_below_it(source, kafka_bootstrap, pg_uri, unique_id):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, fail_offsets=[350])
    cfg = make_task(unique_id, max_chunks=1)

    assert run_dag(cfg, REF) == "failed"

    assert watermark(pg_uri, unique_id) == 0
    rows = dict(query(pg_uri, "SELECT id, status FROM crawler_ops.batch_status WHERE task_name = %s", unique_id))
    assert all(rows[lo] == 2 for lo in range(400, 1_000, 100)), "newer batches are done"
    assert rows[300] == 0, "the failing batch is pending again"
    error = query(
        pg_uri, "SELECT last_error, attempts FROM crawler_ops.batch_status WHERE task_name = %s AND id = 300", unique_id
    )[0]
    assert "HTTP 500" in error[0] and "[300, 400)" in error[0] and error[1] == 1
    assert "[300, 400)" in json.dumps(run_record(pg_uri, unique_id)["errors"])

    source.clear_faults(unique_id)
    source.clear_requests(unique_id)
    assert run_dag(cfg, REF) == "success"

    assert sorted(r["offset"] for r in source.page_requests(unique_id)) == [0, 100, 200, 300]
    assert watermark(pg_uri, unique_id) == 1_000
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert len({m.key for m in messages}) == 1_000 and not duplicates(messages)


def test_total_shrinking_is_reported_and_keeps_the_watermark(source, pg_uri, unique_id):
    source.create(unique_id, total=600, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    source.truncate(unique_id, 450)
    source.clear_requests(unique_id)

    assert run_dag(cfg, REF) == "success"

    assert watermark(pg_uri, unique_id) == 600
    assert "shrank to 450, below the watermark 600" in json.dumps(run_record(pg_uri, unique_id)["errors"])
    assert source.page_requests(unique_id) == []
    failing = make_task(unique_id, on_shrink="fail")
    assert run_dag(failing, REF) == "failed"
    assert watermark(pg_uri, unique_id) == 600


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        ({"malformed_rate": 1.0}, "malformed JSON"),
        ({"wrong_shape": True}, "has no list of records at 'data.data'"),
        ({"short_pages": True}, "expected 100 (short page"),
    ],
    ids=["malformed-json", "wrong-shape", "short-pages"],
)
def test_unusable_pages_fail_the_run_with_a_clear_error_and_publish_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, faults, expected
):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    source.faults(unique_id, **faults)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF) == "failed"

    assert expected in json.dumps(run_record(pg_uri, unique_id)["errors"], ensure_ascii=False)
    assert not watermark(pg_uri, unique_id), "absent (plan failed) or 0 (commit found nothing done)"
    assert done_batches(pg_uri, unique_id) == 0
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []


def test_records_with_bad_dates_are_dead_lettered_with_the_reason(source, kafka_bootstrap, pg_uri, unique_id):
    source.create(unique_id, total=800, ref=REF, in_window_share=1.0)
    source.faults(unique_id, bad_date_share=0.1, fallback_share=0.1)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF) == "success"

    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert truth["bad_date_ids"], "the fault injected bad dates"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert sorted(m.key for m in messages) == sorted(truth["in_window_ids"])
    dead = query(
        pg_uri,
        "SELECT record->>'id', reason FROM crawler_ops.crawl_error WHERE kind = 'record' AND task_id = %s",
        unique_id,
    )
    assert sorted(row[0] for row in dead) == sorted(truth["bad_date_ids"])
    assert all("aae397='not-a-date' unparseable" in reason and "Collect_time missing" in reason for _, reason in dead)
    assert run_record(pg_uri, unique_id)["dead_lettered"] == len(dead)
    assert watermark(pg_uri, unique_id) == 800


def test_transient_5xx_and_429_are_retried_and_nothing_is_lost(source, kafka_bootstrap, pg_uri, unique_id):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, error_rate=0.3, rate_limit_every=4, retry_after_s=1)
    cfg = make_task(unique_id, source={"max_retries": 10})

    assert run_dag(cfg, REF) == "success"

    statuses = {r["status"] for r in source.page_requests(unique_id)}
    assert {200, 429, 500} <= statuses
    assert len({m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}) == 1_000
    assert watermark(pg_uri, unique_id) == 1_000


def test_missing_topic_with_creation_off_fails_before_fetching_and_names_the_topic(source, pg_uri, unique_id):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"topic": f"absent.{unique_id}", "create_topic": False})

    with pytest.raises(DeliveryError, match=f"topic 'absent.{unique_id}' does not exist"):
        plan_run(RunContext(cfg=cfg, run_id="no-topic", ref=REF, params=RunParams()))
    assert run_dag(cfg, REF) == "failed"

    assert source.page_requests(unique_id) == []
    assert watermark(pg_uri, unique_id) is None


def test_kafka_unreachable_fails_the_plan_naming_the_topic(source, pg_uri, unique_id, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEAD",
        '{"conn_type": "kafka", "extra": {"bootstrap.servers": '
        '"127.0.0.1:1", "socket.connection.setup.timeout.ms": 1000}}',
    )
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"conn_id": "kafka_dead"})

    with pytest.raises(DeliveryError, match=f"Kafka is unreachable while checking topic 'test.{unique_id}'"):
        plan_run(RunContext(cfg=cfg, run_id="kafka-down", ref=REF, params=RunParams()))
    assert source.page_requests(unique_id) == []
    assert watermark(pg_uri, unique_id) is None


def test_postgres_unreachable_fails_the_plan_naming_the_connection(source, unique_id, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CRAWLER_DB_DEAD", "postgresql://postgres@127.0.0.1:1/crawler")
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, postgres_conn_id="crawler_db_dead")

    with pytest.raises(StatusTableError, match=f"task {unique_id}: cannot connect to PostgreSQL .*'crawler_db_dead'"):
        plan_run(RunContext(cfg=cfg, run_id="pg-down", ref=REF, params=RunParams()))
    assert source.page_requests(unique_id) == []


def test_two_runs_forced_at_once_never_crawl_the_same_batch(source, kafka_bootstrap, pg_uri, unique_id):
    """max_active_runs=1 keeps Airflow from doing this; the database guard must hold when it happens anyway."""
    source.create(unique_id, total=2_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, latency_ms=30)
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 2})
    runs = [RunContext(cfg=cfg, run_id=f"forced-{name}", ref=REF, params=RunParams()) for name in "ab"]
    plans = [plan_run(run) for run in runs]
    assert plans[0] == plans[1], "the second plan reuses the first plan's batch rows"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests/integration/chunk_runner.py"),
                json.dumps(
                    {
                        "config": cfg.model_dump(mode="json"),
                        "run_id": run.run_id,
                        "ref": REF.isoformat(),
                        "map_index": 0,
                        "try_number": 1,
                        "payload": plan[0],
                    }
                ),
            ],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for run, plan in zip(runs, plans, strict=True)
    ]
    results = [json.loads(w.communicate(timeout=300)[0].strip().splitlines()[-1]) for w in workers]
    summaries = [commit_run(run, plan, [result]) for run, plan, result in zip(runs, plans, results, strict=True)]

    offsets = [r["offset"] for r in source.page_requests(unique_id)]
    assert sorted(offsets) == list(range(0, 2_000, 100)), "every batch fetched exactly once"
    assert sum(r["batches_done"] for r in results) == 20
    assert all(r["batches_skipped"] > 0 for r in results), "both runs really ran at the same time"
    assert [s.status for s in summaries] == ["success", "success"]
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert len(messages) == 2_000 and not duplicates(messages)
    assert watermark(pg_uri, unique_id) == 2_000
