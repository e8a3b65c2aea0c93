"""Crashes and bad input: nothing lost, at most one batch duplicated, the watermark consistent."""

from __future__ import annotations

import itertools
import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from crawler_ops.errors import DeliveryError, StatusTableError
from tests.support import (
    Forwarded,
    MissingTopic,
    done_batches,
    duplicated_offsets,
    duplicates,
    make_task,
    query,
    read_topic,
    run_record,
    runner_result,
    spawn_chunk,
    watermark,
)

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
TOLERANCE_S = 24 * 3600


def pages_below(offset: int | None = None) -> Callable[[str, dict[str, str]], bool]:
    """Page requests (not the one-record window probes), all or those for offsets below ``offset``."""

    def is_page(_path: str, params: dict[str, str]) -> bool:
        if "offset" not in params or params.get("limit") == "1":
            return False
        return offset is None or int(params["offset"]) < offset

    return is_page


def wait_for_offsets(bootstrap: str, topic: str, offsets: set[int], deadline_s: float = 120) -> None:
    """Wait until every record of ``offsets`` is in the topic (the producer delivers in the background)."""
    deadline = time.monotonic() + deadline_s
    while not offsets <= {int(m.headers["source_offset"]) for m in read_topic(bootstrap, topic)}:
        assert time.monotonic() < deadline, f"offsets {min(offsets)}..{max(offsets)} never reached {topic}"
        time.sleep(0.2)


def test_sigkill_after_publishing_a_batch_then_retry_loses_nothing_and_duplicates_only_that_batch(
    source, source_proxy, kafka_bootstrap, pg_uri, unique_id
):
    source.create(unique_id, total=3_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 2, "conn_id": source_proxy.conn_id})
    run = RunContext(cfg=cfg, run_id="crash-run", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)
    # The chunk crawls [2000, 3000) newest first and then waits for page [1900, 2000): by then batch [2000, 2100)
    # is produced but not yet marked done (it is marked once the next page is filtered).
    source_proxy.hold(pages_below(2_000))
    worker = spawn_chunk(cfg, run.run_id, REF, chunk)
    source_proxy.wait_held(2)  # [1900, 2000) and the prefetched [1800, 1900): the chunk is past batch 2000's send
    wait_for_offsets(kafka_bootstrap, cfg.kafka.topic, set(range(2_000, 2_100)))

    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert done_batches(pg_uri, unique_id) == {lo: lo + 100 for lo in range(2_100, 3_000, 100)}
    source_proxy.release()

    # Airflow's retry of the killed task instance: same run, same map index, next try.
    result = crawl_chunk(replace(run, try_number=2), chunk)
    summary = commit_run(run, [chunk], [result])

    assert summary.status == "success"
    assert result["batches_skipped"] == 9, "done batches were not fetched again"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert {m.key for m in messages} == set(truth["in_window_ids"]), "nothing lost"
    assert duplicated_offsets(messages) == list(range(2_000, 2_100)), "only the batch in flight is published again"
    assert set(duplicates(messages).values()) == {2}
    assert watermark(pg_uri, unique_id) == 3_000


def test_persistently_failing_page_keeps_the_watermark_below_it(source, kafka_bootstrap, pg_uri, unique_id, run_dag):
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
    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert sorted(m.key for m in messages) == sorted(truth["in_window_ids"]), "each record once, none lost"


@pytest.mark.parametrize(
    ("status", "requests"),
    [(404, 1), (400, 1), (500, (2 + 1) * (1 + 1))],
    ids=["404-at-once", "400-at-once", "500-retried-by-the-hook-and-by-airflow"],
)
def test_a_4xx_page_fails_the_run_at_once_without_retries(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag, status, requests
):
    source.create(unique_id, total=600, ref=REF, in_window_share=1.0)
    source.faults(unique_id, fail_offsets=[250], fail_status=status)
    cfg = make_task(unique_id, max_chunks=1, retries=1, retry_delay_s=0, source={"max_retries": 2})

    assert run_dag(cfg, REF) == "failed"

    tries = [r for r in source.page_requests(unique_id) if r["offset"] == 200]
    assert [r["status"] for r in tries] == [status] * requests
    assert f"answered HTTP {status}" in json.dumps(run_record(pg_uri, unique_id)["errors"])
    assert done_batches(pg_uri, unique_id) == {300: 400, 400: 500, 500: 600}, "newer batches are done"
    assert {int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, cfg.kafka.topic)} == set(
        range(300, 600)
    )


def test_total_shrinking_is_reported_and_keeps_the_watermark(source, pg_uri, unique_id, run_dag):
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
    assert source.page_requests(unique_id) == []


def test_on_shrink_reset_forgets_the_watermark_and_crawls_what_the_source_has_now(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=600, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, on_shrink="reset")
    assert run_dag(cfg, REF) == "success"
    source.truncate(unique_id, 450)
    source.clear_requests(unique_id)

    assert run_dag(cfg, REF) == "success"

    record = run_record(pg_uri, unique_id)
    assert (record["mode"], record["old_watermark"], record["new_watermark"]) == ("first", None, 450)
    assert "shrank to 450, below the watermark 600" in json.dumps(record["errors"])
    assert "watermark and status rows reset" in json.dumps(record["errors"])
    assert sorted((r["offset"], r["limit"]) for r in source.page_requests(unique_id)) == [
        (0, 50),
        (50, 100),
        (150, 100),
        (250, 100),
        (350, 100),
    ]
    again = [m for m in read_topic(kafka_bootstrap, cfg.kafka.topic) if m.headers["run_id"] == record["run_id"]]
    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert sorted(m.key for m in again) == sorted(truth["in_window_ids"]) and len(again) == 450
    assert watermark(pg_uri, unique_id) == 450


@pytest.mark.parametrize(
    ("faults", "expected", "planned"),
    [
        # the plan's window probe fails: no watermark yet, and a plan without batches makes no topic
        ({"malformed_rate": 1.0}, "malformed JSON", False),
        ({"wrong_shape": True}, "has no list of records at 'data.data'", False),
        # the chunks fail; nothing is done, so the commit sets no watermark and the next run is a first crawl
        ({"short_pages": True}, "expected 100 (short page", True),
    ],
    ids=["malformed-json", "wrong-shape", "short-pages"],
)
def test_unusable_pages_fail_the_run_with_a_clear_error_and_publish_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, faults, expected, planned, run_dag
):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    source.faults(unique_id, **faults)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF) == "failed"

    assert expected in json.dumps(run_record(pg_uri, unique_id)["errors"], ensure_ascii=False)
    assert watermark(pg_uri, unique_id) is None
    assert done_batches(pg_uri, unique_id) == {}
    if planned:
        assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []
    else:
        with pytest.raises(MissingTopic):
            read_topic(kafka_bootstrap, cfg.kafka.topic)


def test_records_with_bad_dates_are_dead_lettered_with_the_reason(source, kafka_bootstrap, pg_uri, unique_id, run_dag):
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


def test_transient_5xx_and_429_are_retried_honouring_retry_after_and_nothing_is_lost(
    source, source_proxy, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, error_rate=0.3, rate_limit_every=4, retry_after_s=1)
    cfg = make_task(unique_id, source={"max_retries": 10, "conn_id": source_proxy.conn_id})

    assert run_dag(cfg, REF) == "success"

    by_page: dict[tuple[int, int], list[Forwarded]] = {}
    for request in sorted(source_proxy.log, key=lambda r: r.arrived):
        if request.page is not None:
            by_page.setdefault(request.page, []).append(request)
    statuses = {r.status for tries in by_page.values() for r in tries}
    assert {200, 429, 500} <= statuses
    assert all(tries[-1].status == 200 for tries in by_page.values()), "every page was retried until it was served"
    waits = [
        b.arrived - a.answered for tries in by_page.values() for a, b in itertools.pairwise(tries) if a.status == 429
    ]
    assert waits and min(waits) >= 0.95, "after a 429 the next try waits the Retry-After second (backoff is 0.05 s)"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert sorted(m.key for m in messages) == sorted(truth["in_window_ids"]), "each record once, none lost"
    assert watermark(pg_uri, unique_id) == 1_000


def test_missing_topic_with_creation_off_fails_before_fetching_and_names_the_topic(source, pg_uri, unique_id, run_dag):
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

    # The first to need PostgreSQL is the source's rate limit, before the first request.
    with pytest.raises(StatusTableError, match=f"task {unique_id}: .*cannot connect to PostgreSQL .*'crawler_db_dead'"):
        plan_run(RunContext(cfg=cfg, run_id="pg-down", ref=REF, params=RunParams()))
    assert source.page_requests(unique_id) == []


def test_a_worker_that_lost_its_claim_stops_before_publishing_that_batch(
    source, source_proxy, kafka_bootstrap, pg_uri, unique_id
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 1, "conn_id": source_proxy.conn_id})
    run = RunContext(cfg=cfg, run_id="losing-run", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)
    source_proxy.hold(pages_below(600))  # the chunk crawls [600, 1000), claims [500, 600) and waits for its page
    failures: list[BaseException] = []

    def crawl() -> None:
        try:
            crawl_chunk(run, chunk)
        except Exception as exc:  # noqa: BLE001 - asserted below
            failures.append(exc)

    worker = threading.Thread(target=crawl)
    worker.start()
    source_proxy.wait_held(1)
    # Another worker takes [500, 600) over, as after an expired lease.
    taken = query(
        pg_uri,
        "UPDATE crawler_ops.batch_status SET claim_token = 'other-run|0|1|x', start_time = now() "
        "WHERE task_name = %s AND id = 500 AND status = 1 RETURNING id",
        unique_id,
    )
    assert taken == [(500,)], "the worker held [500, 600) while it waited for the page"
    source_proxy.release()
    worker.join(120)

    (failure,) = failures
    assert isinstance(failure, StatusTableError)
    assert "batch [500, 600) is no longer claimed by this worker" in str(failure)
    offsets = {int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}
    assert offsets == set(range(600, 1_000)), "nothing of the lost batch (or older ones) published"
    assert done_batches(pg_uri, unique_id) == {lo: lo + 100 for lo in range(600, 1_000, 100)}
    row = query(
        pg_uri,
        "SELECT status, claim_token FROM crawler_ops.batch_status WHERE task_name = %s AND id = 500",
        unique_id,
    )
    assert row == [(1, "other-run|0|1|x")], "the new holder's claim is left alone"
    assert "no longer claimed" in json.dumps(run_record(pg_uri, unique_id)["errors"])


def test_two_runs_forced_at_once_never_crawl_the_same_batch(source, source_proxy, kafka_bootstrap, pg_uri, unique_id):
    """max_active_runs=1 keeps Airflow from doing this; the database guard must hold when it happens anyway."""
    source.create(unique_id, total=2_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 2, "conn_id": source_proxy.conn_id})
    runs = [RunContext(cfg=cfg, run_id=f"forced-{name}", ref=REF, params=RunParams(), map_index=0) for name in "ab"]
    plans = [plan_run(run) for run in runs]
    assert plans[0] == plans[1], "the second plan reuses the first plan's batch rows"
    source.clear_requests(unique_id)
    # Both workers claim their first two batches before either fetches a page: they really overlap.
    source_proxy.hold(pages_below())
    workers = [spawn_chunk(cfg, run.run_id, REF, plan[0]) for run, plan in zip(runs, plans, strict=True)]
    source_proxy.wait_held(2 * cfg.source.concurrency)
    source_proxy.release()
    results = [runner_result(w) for w in workers]
    summaries = [commit_run(run, plan, [result]) for run, plan, result in zip(runs, plans, results, strict=True)]

    offsets = [r["offset"] for r in source.page_requests(unique_id)]
    assert sorted(offsets) == list(range(0, 2_000, 100)), "every batch fetched exactly once"
    assert sum(r["batches_done"] for r in results) == 20
    assert all(r["batches_skipped"] > 0 for r in results), "each run skipped batches the other held"
    assert [s.status for s in summaries] == ["success", "success"]
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert {m.key for m in messages} == set(
        source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"]
    )
    assert not duplicates(messages)
    assert watermark(pg_uri, unique_id) == 2_000
