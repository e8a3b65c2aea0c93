"""Exactly-once delivery on the real broker: chunk processes SIGKILLed around the Kafka commit, then retried.

Each test crawls one chunk in a child process (``chunk_runner.py``, as an Airflow task process would run it),
kills it, runs the next try to the end, commits, and compares what a ``read_committed`` consumer sees with the
source's ground truth. The same kills under ``at_least_once`` lose nothing and duplicate at most one batch each.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, plan_run
from crawler_ops.message.values import unframed
from crawler_ops.planning import ChunkPlan
from tests.support import (
    Delivered,
    make_task,
    query,
    read_topic,
    routed_topics,
    run_record,
    runner_result,
    spawn_chunk,
)

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
BATCH = 100


def done_batches(pg_uri: str, task_id: str) -> int:
    sql = "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 2"
    return int(query(pg_uri, sql, task_id)[0][0])


def start_chunk(
    cfg: CrawlTaskConfig, run: RunContext, chunk: dict[str, Any], try_number: int, kill: dict[str, Any] | None = None
) -> subprocess.Popen[str]:
    return spawn_chunk(cfg, run.run_id, REF, chunk, try_number, kill)


def setup_run(
    source: Any, unique_id: str, delivery: str, total: int = 2_000, latency_ms: int = 20, value_format: str = "json"
) -> tuple[CrawlTaskConfig, RunContext, ChunkPlan]:
    source.create(unique_id, total=total, ref=REF, in_window_share=1.0)
    source.faults(unique_id, latency_ms=latency_ms)
    kafka = {"delivery": delivery, "value_format": value_format}
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 2}, kafka=kafka)
    run = RunContext(cfg=cfg, run_id=f"eo-{delivery}", ref=REF, params=RunParams())
    [chunk] = plan_run(run)
    return cfg, run, chunk


def die_at_third_batch(cfg: CrawlTaskConfig, run: RunContext, chunk: dict[str, Any], point: str) -> None:
    """Run the chunk's first try until it SIGKILLs itself at its third batch, at ``point``."""
    killed = start_chunk(cfg, run, chunk, 1, kill={"point": point, "nth": 3})
    killed.wait(timeout=300)
    assert killed.returncode == -signal.SIGKILL


def batches_of(keys: Counter[str], messages: list[Delivered]) -> set[int]:
    """The batches (start offsets) whose records appear more than once."""
    return {int(m.headers["source_offset"]) // BATCH * BATCH for m in messages if keys[m.key] > 1}


def keys(messages: list[Delivered]) -> Counter[str]:
    return Counter(m.key for m in messages)


def read_keys(bootstrap: str, topic: str, isolation: str, chunk: ChunkPlan) -> Counter[str]:
    """The keys a consumer reads; each value framed with the plan's schema id when the task writes Avro."""
    messages = read_topic(bootstrap, topic, isolation=isolation, decode=bytes)
    if chunk.schema_id is not None:
        assert {unframed(m.value)[0] for m in messages} == {chunk.schema_id}
    return keys(messages)


# Exactly-once holds whatever the values are: JSON as sent, or Avro framed with a registry's schema id.
VALUE_FORMATS = pytest.mark.parametrize("value_format", ["json", "avro"])


@VALUE_FORMATS
def test_a_kill_before_the_kafka_commit_leaves_nothing_visible_and_the_retry_publishes_each_record_once(
    source, kafka_bootstrap, pg_uri, unique_id, value_format
):
    cfg, run, chunk = setup_run(source, unique_id, "exactly_once", value_format=value_format)
    die_at_third_batch(cfg, run, chunk, "before_commit")
    assert done_batches(pg_uri, unique_id) == 2

    result = runner_result(start_chunk(cfg, run, chunk, 2))
    summary = commit_run(run, [chunk], [result])

    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])
    committed = read_keys(kafka_bootstrap, cfg.kafka.topic, "read_committed", chunk)
    assert set(committed) == truth and max(committed.values()) == 1
    uncommitted = read_topic(kafka_bootstrap, cfg.kafka.topic, isolation="read_uncommitted", decode=bytes)
    # The killed attempt had produced the third batch [1700, 1800) in a transaction that never committed.
    assert batches_of(keys(uncommitted), uncommitted) == {1_700}
    assert summary.status == "success" and summary.counts.published == len(truth)


@VALUE_FORMATS
def test_a_kill_after_the_kafka_commit_records_the_batch_done_without_fetching_or_producing_it_again(
    source, kafka_bootstrap, pg_uri, unique_id, value_format
):
    cfg, run, chunk = setup_run(source, unique_id, "exactly_once", value_format=value_format)
    die_at_third_batch(cfg, run, chunk, "after_commit")
    assert done_batches(pg_uri, unique_id) == 2, "Kafka committed the third batch; PostgreSQL never heard of it"
    source.clear_requests(unique_id)

    result = runner_result(start_chunk(cfg, run, chunk, 2))
    summary = commit_run(run, [chunk], [result])

    assert 1_700 not in {r["offset"] for r in source.page_requests(unique_id)}, "the committed batch was fetched again"
    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])
    for isolation in ("read_committed", "read_uncommitted"):
        seen = read_keys(kafka_bootstrap, cfg.kafka.topic, isolation, chunk)
        assert set(seen) == truth and max(seen.values()) == 1, isolation
    assert summary.status == "success"
    record = run_record(pg_uri, unique_id)
    assert record["published"] == len(truth) and record["kept"] == len(truth)


@pytest.mark.slow
@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_ten_kills_at_random_points_lose_nothing(source, kafka_bootstrap, pg_uri, unique_id, delivery):
    cfg, run, chunk = setup_run(source, unique_id, delivery, total=5_000, latency_ms=60)
    rng = random.Random(unique_id)
    kills = 0
    for attempt in range(1, 11):
        before = done_batches(pg_uri, unique_id)
        worker = start_chunk(cfg, run, chunk, attempt)
        deadline = time.monotonic() + 120
        # Let the attempt make progress (at least one batch done), then kill it at a random moment.
        while done_batches(pg_uri, unique_id) <= before and worker.poll() is None:
            assert time.monotonic() < deadline, "the attempt made no progress"
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.1))
        if worker.poll() is not None:
            break
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        kills += 1
    assert kills >= 8, f"only {kills} attempts could be killed before the chunk finished"
    result = runner_result(start_chunk(cfg, run, chunk, 11))
    assert commit_run(run, [chunk], [result]).status == "success"

    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    seen = keys(messages)
    assert set(seen) == truth, "missing or unexpected records"
    if delivery == "exactly_once":
        assert max(seen.values()) == 1, f"duplicates under exactly_once: {sum(n - 1 for n in seen.values())}"
    else:
        duplicated = batches_of(seen, messages)
        assert len(duplicated) <= kills, f"{len(duplicated)} batches duplicated by {kills} kills"


def test_a_kill_before_the_kafka_commit_leaves_nothing_visible_on_any_routed_topic(
    source, kafka_bootstrap, pg_uri, unique_id
):
    source.create(unique_id, total=2_000, ref=REF, in_window_share=1.0, city_codes=True)
    source.faults(unique_id, latency_ms=20)
    prefix = f"test.{unique_id}.city."
    kafka = {"delivery": "exactly_once", "topic_template": prefix + "{city_code}"}
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 2}, kafka=kafka)
    run = RunContext(cfg=cfg, run_id="eo-routed", ref=REF, params=RunParams())
    [chunk] = plan_run(run)
    die_at_third_batch(cfg, run, chunk, "before_commit")

    summary = commit_run(run, [chunk], [runner_result(start_chunk(cfg, run, chunk, 2))])

    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])
    topics = routed_topics(kafka_bootstrap, prefix)
    committed = Counter(m.key for t in topics for m in read_topic(kafka_bootstrap, t))
    assert set(committed) == truth and max(committed.values()) == 1, "every record once, across all routed topics"
    uncommitted = [m for t in topics for m in read_topic(kafka_bootstrap, t, isolation="read_uncommitted")]
    assert batches_of(keys(uncommitted), uncommitted) == {1_700}, "the aborted batch is spread over the topics too"
    assert summary.status == "success" and summary.counts.published == len(truth)
