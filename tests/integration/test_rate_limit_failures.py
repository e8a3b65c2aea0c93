"""The rate limiter's PostgreSQL failing under a running crawl chunk (its own process, as an Airflow task runs it):
its connection terminated mid-crawl, and its pacing row held locked by another session.

The limiter (:mod:`crawler_ops.hooks.source.ratelimit`) replaces a lost connection within the request, so the crawl goes
on at the shared rate; a request waits for a locked row up to the lock_timeout, and a row lock held longer fails the
request, and with it the chunk, with an error naming the task and the source; the batches in flight go back for the
next attempt, which finishes the crawl.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import psycopg
import pytest

from crawler_ops.hooks.store.sqlfiles import read_sql
from tests.integration.test_rate_limits import (
    ALLOWED,
    LIMIT,
    REF,
    arrivals,
    busiest_second,
    forget_rate_rows,
    limited_task,
    plan,
    shared_rate,
)
from tests.support import DemoSource, SourceProxy, done_batches, query, read_topic, runner_result, spawn_chunk

pytestmark = pytest.mark.integration

__all__ = ["forget_rate_rows"]  # a fixture of test_rate_limits, used here too

TOTAL, BATCH = 3_000, 100
#: Pages at offsets below this wait at the proxy until the test lets them through: the crawl (newest first) is
#: then half-way, with a limiter that has been talking to PostgreSQL.
HALF = TOTAL // 2


def one_chunk_task(task_id: str, conn_id: str) -> Any:
    cfg = limited_task(task_id, conn_id, concurrency=2, max_in_flight=None)
    return cfg.model_copy(update={"max_chunks": 1})


def limiter_backends(pg_uri: str, worker: subprocess.Popen[str]) -> list[int]:
    """The PostgreSQL backends of ``worker``'s rate limiter: its connections whose last statement was one of the
    limiter's (the test process's own limiter, which planned the run, is not the worker's)."""
    ports = {c.laddr.port for c in psutil.Process(worker.pid).net_connections(kind="tcp") if c.raddr}
    heads = [read_sql(f"ratelimit/{name}")[:60] for name in ("take", "throttle", "add_source")]
    rows = query(pg_uri, "SELECT pid, client_port FROM pg_stat_activity WHERE left(query, 60) = ANY(%s)", heads)
    return [pid for pid, port in rows if port in ports]


def start_half_way(source: DemoSource, source_proxy: SourceProxy, task_id: str, run_id: str) -> Any:
    """Plan a crawl of one chunk on the proxy's connection and start it in its own process; return the task, the
    chunk and the process once the crawl's first page below :data:`HALF` is held at the proxy."""
    cfg = one_chunk_task(task_id, source_proxy.conn_id)
    source.create(cfg.id, total=TOTAL, ref=REF, in_window_share=1.0)
    (chunk,) = plan(cfg, run_id)
    source_proxy.hold(lambda path, params: path.endswith("/list") and int(params.get("offset", TOTAL)) < HALF)
    worker = spawn_chunk(cfg, run_id, REF, chunk)
    source_proxy.wait_held(1)
    assert worker.poll() is None, "the chunk ended before it was half-way"
    return cfg, chunk, worker


def assert_every_record_as_served(source: DemoSource, cfg: Any, kafka_bootstrap: str) -> None:
    """Every record of the source is in the topic, each message the record the source serves at its offset (a
    batch published again by a retry repeats the same record)."""
    served = [r for lo in range(0, TOTAL, 1_000) for r in source.records(cfg.id, lo, 1_000)]
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert {int(m.headers["source_offset"]) for m in messages} == set(range(TOTAL)), "no record lost"
    for message in messages:
        record = served[int(message.headers["source_offset"])]
        assert (message.key, message.value) == (record["id"], record)


@pytest.mark.slow
def test_the_limiter_reconnects_when_its_postgresql_backend_is_terminated_mid_crawl(
    source, source_proxy, pg_uri, kafka_bootstrap, unique_id, forget_rate_rows
):
    forget_rate_rows.append(source_proxy.conn_id)
    try:
        cfg, _, worker = start_half_way(source, source_proxy, unique_id, "terminated")
        backends = limiter_backends(pg_uri, worker)
        assert len(backends) == 1, f"the worker's limiter has one connection: {backends}"
        ((terminated, at),) = query(pg_uri, "SELECT pg_terminate_backend(%s), clock_timestamp()", backends[0])
        assert terminated
        served_before = len(source_proxy.log)
    finally:
        source_proxy.release()

    runner_result(worker)

    ((updated,),) = query(
        pg_uri, "SELECT updated_at FROM crawler_ops.source_rate WHERE source = %s", cfg.source.conn_id
    )
    assert updated > at, "the limiter reserved slots on a new connection after its backend was terminated"
    assert len(source_proxy.log) > served_before + 10, "the pages below the half were read after the terminate"
    assert len(done_batches(pg_uri, cfg.id)) == TOTAL // BATCH
    assert_every_record_as_served(source, cfg, kafka_bootstrap)
    assert busiest_second(arrivals(source_proxy.log)) <= ALLOWED, "the shared rate held over the reconnect"
    assert shared_rate(pg_uri, source_proxy.conn_id)[:2] == (LIMIT, LIMIT)


@contextmanager
def pacing_row_locked(
    pg_uri: str, source: DemoSource, source_proxy: SourceProxy, task_id: str, run_id: str
) -> Iterator[Any]:
    """:func:`start_half_way`, then lock the connection's pacing row in another session and let the held pages go;
    the row stays locked until the block ends."""
    with psycopg.connect(pg_uri) as locker:
        try:
            started = start_half_way(source, source_proxy, task_id, run_id)
            locker.execute(
                "SELECT source FROM crawler_ops.source_rate WHERE source = %s FOR UPDATE", (source_proxy.conn_id,)
            )
            source_proxy.release()
            yield started
        finally:
            locker.rollback()
            source_proxy.release()


def wait_until_limiter_waits_for_lock(pg_uri: str, worker: subprocess.Popen[str]) -> None:
    """Wait until ``worker``'s limiter is waiting for a row lock."""
    deadline = time.monotonic() + 60
    while True:
        backends = limiter_backends(pg_uri, worker)
        waiting = query(
            pg_uri, "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event_type = 'Lock'", backends
        )
        if waiting:
            return
        assert worker.poll() is None, "the chunk ended instead of waiting for the locked row"
        assert time.monotonic() < deadline, f"the worker's limiter ({backends}) never waited for the locked row"
        time.sleep(0.1)


def test_a_pacing_row_locked_for_less_than_the_lock_timeout_holds_requests_back_and_the_crawl_goes_on(
    source, source_proxy, pg_uri, kafka_bootstrap, unique_id, forget_rate_rows
):
    forget_rate_rows.append(source_proxy.conn_id)
    with pacing_row_locked(pg_uri, source, source_proxy, unique_id, "briefly-locked") as (cfg, _, worker):
        wait_until_limiter_waits_for_lock(pg_uri, worker)

    runner_result(worker)

    assert len(done_batches(pg_uri, cfg.id)) == TOTAL // BATCH
    assert_every_record_as_served(source, cfg, kafka_bootstrap)


@pytest.mark.slow
def test_a_held_pacing_row_fails_the_chunk_after_the_lock_timeout_naming_the_task_and_loses_nothing(
    source, source_proxy, pg_uri, kafka_bootstrap, unique_id, forget_rate_rows, capfd
):
    forget_rate_rows.append(source_proxy.conn_id)
    with pacing_row_locked(pg_uri, source, source_proxy, unique_id, "locked") as (cfg, chunk, worker):
        # The worker's next slots wait for the row: each waiting request fails after the lock_timeout.
        deadline = time.monotonic() + 120
        while worker.poll() is None:
            assert time.monotonic() < deadline, "the chunk is still waiting for the locked row"
            time.sleep(0.2)
    worker.communicate()

    assert worker.returncode != 0, "the chunk failed"
    errors = capfd.readouterr().err
    assert f"task {cfg.id}" in errors and "lock timeout" in errors and source_proxy.conn_id in errors, errors
    assert "(lock_timeout)" in errors, "the error says which timeout fired"
    failed = query(
        pg_uri,
        "SELECT id, last_error FROM crawler_ops.batch_status WHERE task_name = %s AND last_error IS NOT NULL",
        cfg.id,
    )
    assert failed and all("lock timeout" in error for _, error in failed), "the batches in flight carry the error"
    assert len(done_batches(pg_uri, cfg.id)) < TOTAL // BATCH

    runner_result(spawn_chunk(cfg, "locked", REF, chunk, try_number=2))

    assert len(done_batches(pg_uri, cfg.id)) == TOTAL // BATCH
    assert_every_record_as_served(source, cfg, kafka_bootstrap)
    assert shared_rate(pg_uri, source_proxy.conn_id)[:2] == (LIMIT, LIMIT), "the lock left the shared rate alone"
