"""Exactly-once delivery beyond the first crawl, on the real broker: replays, backfills, a reset, and Kafka
transactions that cannot start.

Each run is driven step by step (plan, chunk, commit) with the run context Airflow gives it; a chunk that is killed
runs in its own process (``pause_runner.py``, ``chunk_runner.py``) and its next try runs to the end here. What a
``read_committed`` consumer sees is compared with what each run should publish.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from crawler_ops.errors import DeliveryError
from crawler_ops.planning import ChunkPlan
from tests.support import (
    Delivered,
    chunk_spec,
    make_task,
    query,
    read_topic,
    run_record,
    spawn_chunk,
    spawn_runner,
    watermark,
)

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
TOLERANCE_S = 24 * 3600
KILL_AFTER_SECOND_COMMIT = {"point": "after_commit", "nth": 2}


def exactly_once_task(
    source: Any, unique_id: str, total: int = 1_000, conn_id: str = "kafka_default"
) -> CrawlTaskConfig:
    source.create(unique_id, total=total, ref=REF, in_window_share=1.0)
    kafka = {"delivery": "exactly_once", "conn_id": conn_id}
    return make_task(unique_id, max_chunks=1, source={"concurrency": 2}, kafka=kafka)


def crawl_everything(run: RunContext) -> list[ChunkPlan]:
    """Plan, crawl and commit ``run`` in this process; returns its chunks."""
    chunks = plan_run(run)
    results = [crawl_chunk(replace(run, map_index=i), chunk) for i, chunk in enumerate(chunks)]
    assert commit_run(run, chunks, results).status == "success"
    return chunks


def killed_then_retried(run: RunContext, chunk: ChunkPlan, backfill: tuple[datetime, datetime] | None = None) -> None:
    """The chunk's first try, in its own process, SIGKILLs itself once Kafka committed its second batch; its second
    try runs to the end here, then the run commits."""
    spec = chunk_spec(
        run.cfg,
        run.run_id,
        run.ref,
        chunk,
        params={"replay_from": run.params.replay_from, "replay_to": run.params.replay_to},
        backfill=[backfill[0].isoformat(), backfill[1].isoformat()] if backfill else None,
        kill=KILL_AFTER_SECOND_COMMIT,
    )
    first = spawn_runner("pause_runner.py", spec)
    first.communicate(timeout=300)
    assert first.returncode == -signal.SIGKILL, f"the first try ended with {first.returncode}, not at its kill"
    result = crawl_chunk(replace(run, map_index=0, try_number=2), chunk)
    assert commit_run(run, [chunk], [result]).status == "success"


def of_run(messages: list[Delivered], run_id: str) -> Counter[str]:
    return Counter(m.key for m in messages if m.headers["run_id"] == run_id)


def offsets_of(messages: list[Delivered], keys: set[str]) -> set[int]:
    return {int(m.headers["source_offset"]) for m in messages if m.key in keys}


@pytest.mark.slow
def test_a_replay_killed_after_a_kafka_commit_and_retried_publishes_its_range_once(source, kafka_bootstrap, unique_id):
    cfg = exactly_once_task(source, unique_id)
    crawl_everything(RunContext(cfg, "first-crawl", REF, RunParams()))
    replay = RunContext(cfg, "replay-200-700", REF, RunParams(replay_from=200, replay_to=700))
    [chunk] = plan_run(replay)

    killed_then_retried(replay, chunk)

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    replayed = of_run(messages, replay.run_id)
    assert offsets_of(messages, set(replayed)) == set(range(200, 700)), "the replay's range, nothing else"
    assert max(replayed.values()) == 1, f"replayed twice under read_committed: {sum(replayed.values()) - 500}"
    assert set(of_run(messages, "first-crawl").values()) == {1}, "the first crawl's records, once each"
    second = replace(replay, run_id="replay-again")
    crawl_everything(second)
    again = of_run(read_topic(kafka_bootstrap, cfg.kafka.topic), second.run_id)
    assert set(again) == set(replayed) and set(again.values()) == {1}, "a replay of the same range publishes it again"


@pytest.mark.slow
def test_a_backfill_killed_after_a_kafka_commit_and_retried_publishes_its_interval_once(
    source, kafka_bootstrap, pg_uri, unique_id
):
    cfg = exactly_once_task(source, unique_id, total=2_000)
    interval = (REF - timedelta(days=5), REF - timedelta(days=1))
    expected = source.ids_between(unique_id, *interval)
    backfill = RunContext(cfg, "backfill__eo", interval[1], RunParams(), backfill_interval=interval)
    [chunk] = plan_run(backfill)
    assert len(chunk.batches) >= 4, f"the interval spans {len(chunk.batches)} batches; the kill needs more"

    killed_then_retried(backfill, chunk, interval)

    published = of_run(read_topic(kafka_bootstrap, cfg.kafka.topic), backfill.run_id)
    assert set(published) == expected, "the interval's records, no other"
    assert max(published.values()) == 1, (
        f"backfilled twice under read_committed: {sum(published.values()) - len(expected)}"
    )
    assert watermark(pg_uri, unique_id) is None, "a backfill never touches the watermark"


def test_a_reset_publishes_every_record_again_once_and_its_own_markers_count_after_a_kill(
    source, kafka_bootstrap, unique_id
):
    cfg = exactly_once_task(source, unique_id)
    crawl_everything(RunContext(cfg, "generation-1", REF, RunParams()))
    reset = RunContext(cfg, "generation-2", REF, RunParams(reset=True))
    [chunk] = plan_run(reset)
    assert len(chunk.batches) == 10, "the reset plans every batch again"

    killed = spawn_chunk(cfg, reset.run_id, REF, chunk, 1, KILL_AFTER_SECOND_COMMIT)
    killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, (
        f"the reset run's first try ended with {killed.returncode} before committing two batches: it took the first "
        "generation's markers for its own"
    )
    source.clear_requests(unique_id)
    result = crawl_chunk(replace(reset, map_index=0, try_number=2), chunk)
    assert commit_run(reset, [chunk], [result]).status == "success"

    # The second try counts the markers its first try committed (batches [900, 1000) and [800, 900)), not the
    # first generation's, which were written for rows the reset deleted.
    refetched = sorted(r["offset"] for r in source.page_requests(unique_id))
    assert refetched == list(range(0, 800, 100)), f"the second try fetched {refetched}"
    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"])
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    for generation in ("generation-1", "generation-2"):
        seen = of_run(messages, generation)
        assert set(seen) == truth, f"{generation}: missing or unexpected records"
        assert max(seen.values()) == 1, f"{generation}: {sum(seen.values()) - len(truth)} records published twice"


def test_kafka_transactions_that_cannot_start_fail_the_chunk_naming_the_task_and_publish_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, monkeypatch
):
    # A transaction timeout above the broker's transaction.max.timeout.ms (15 minutes): the broker refuses the
    # producer's InitProducerId, so init_transactions fails.
    conn_id = f"kafka_txn_{unique_id}"
    extra = {"bootstrap.servers": kafka_bootstrap, "transaction.timeout.ms": 15 * 60_000 + 1}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))
    cfg = exactly_once_task(source, unique_id, conn_id=conn_id)
    run = RunContext(cfg, "refused", REF, RunParams(), map_index=0)
    [chunk] = plan_run(run)

    with pytest.raises(DeliveryError) as failure:
        crawl_chunk(run, chunk)

    message = str(failure.value)
    assert f"task {unique_id}" in message and "cannot start Kafka transactions" in message, message
    assert "batches stay pending" in message, message
    assert "TRANSACTION_TIMEOUT" in message.upper().replace(" ", "_"), message
    statuses = query(
        pg_uri, "SELECT status, count(*) FROM crawler_ops.batch_status WHERE task_name = %s GROUP BY 1", unique_id
    )
    assert statuses == [(0, 10)], f"every batch stays pending, unclaimed: {statuses}"
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == [], "nothing published"
    assert "cannot start Kafka transactions" in json.dumps(run_record(pg_uri, unique_id)["errors"])
    assert commit_run(run, [chunk], []).status == "failed"

    # With the connection fixed, the next try publishes every record once.
    fixed = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"conn_id": "kafka_default"})})
    result = crawl_chunk(replace(run, cfg=fixed, try_number=2), chunk)
    assert commit_run(replace(run, cfg=fixed), [chunk], [result]).status == "success"
    seen = Counter(m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic))
    assert len(seen) == 1_000 and set(seen.values()) == {1}
