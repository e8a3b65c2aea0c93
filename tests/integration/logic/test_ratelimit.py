"""The shared pacing row of a source connection (crawler_ops.hooks.source.ratelimit.SourceRateStore) on PostgreSQL: what
one round trip hands out, the 429 halving, the statement parameters it binds, and its connection's recovery."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.errors import StatusTableError
from crawler_ops.hooks.source import ratelimit
from crawler_ops.hooks.source.ratelimit import SourceLimiter, SourceRateStore, limiter_for, reset_limiters
from tests.integration.logic.conftest import DB_CONN

pytestmark = pytest.mark.integration


@pytest.fixture
def source(pg: psycopg.Connection[Any], crawler_schema: None, name: str) -> Iterator[SourceConfig]:
    """A source connection id of this test's own at 20 requests/s; its pacing row is removed afterwards."""
    yield SourceConfig(
        conn_id=name, requests_per_s=20, min_requests_per_s=4, rate_recovery_s=10, deadline_s=3, max_retry_after_s=50
    )
    pg.execute("DELETE FROM crawler_ops.source_rate WHERE source = %s", (name,))


@pytest.fixture
def store(source: SourceConfig) -> Iterator[SourceRateStore]:
    rate_store = SourceRateStore(DB_CONN, source)
    yield rate_store
    rate_store.close()


def row(pg: psycopg.Connection[Any], source: SourceConfig) -> tuple[Any, ...]:
    found = pg.execute(
        "SELECT ceiling, rate, throttles, next_slot - extract(epoch from clock_timestamp()) "
        "FROM crawler_ops.source_rate WHERE source = %s",
        (source.conn_id,),
    ).fetchone()
    assert found is not None
    return tuple(found)


def test_a_take_hands_out_the_slots_of_the_horizon_at_the_configured_rate(pg, store, source):
    grant = store.take(10)
    assert (grant.rate, grant.interval) == (20, pytest.approx(0.05))
    assert grant.count == 6, "now and every 0.05 s up to 0.25 s ahead"
    assert grant.now - 1e-3 <= grant.first <= grant.now + 1e-3
    assert row(pg, source)[:3] == (20, 20, 0)
    assert store.take(1).count == 1


def test_a_429_halves_the_rate_once_per_cut_interval_down_to_the_floor_and_pauses_every_take(pg, store, source):
    assert store.throttle(2.0) == (10, True)
    assert store.throttle(None) == (10, False), "the answers to requests already in flight are the same signal"
    assert row(pg, source)[2] == 2
    grant = store.take(5)
    assert grant.first - grant.now == pytest.approx(2.0, abs=0.1), "no slot before the Retry-After passed"
    pg.execute(
        "UPDATE crawler_ops.source_rate SET cut_at = cut_at - 1.05, rate = 5 WHERE source = %s", (source.conn_id,)
    )
    assert store.throttle(None) == (4, True), "never below min_requests_per_s"


def test_a_pause_beyond_the_deadline_reserves_nothing_and_says_how_far_the_next_slot_is(pg, store, source):
    store.throttle(40.0)
    grant = store.take(3)
    assert grant.count == 0
    assert grant.first - grant.now == pytest.approx(40.0, abs=0.5)
    store.throttle(1e9)
    assert row(pg, source)[3] < 50 + 1, "a Retry-After is capped at max_retry_after_s"


def test_the_connection_fails_a_held_row_lock_and_a_hung_statement_instead_of_waiting(store):
    db = store.db
    assert db.execute("SHOW lock_timeout").fetchone() == ("10s",)
    assert db.execute("SHOW statement_timeout").fetchone() == ("30s",)
    assert db.autocommit


def test_a_lost_connection_is_replaced_once_and_a_deleted_row_starts_again(pg, store, source):
    store.throttle(None)
    pid = store.db.info.backend_pid
    pg.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert 10 <= store.take(1).rate < 15, "the halved shared row survived; only the connection was new"
    assert store.db.info.backend_pid != pid
    pg.execute("DELETE FROM crawler_ops.source_rate WHERE source = %s", (source.conn_id,))
    assert store.take(1).rate == 20


def test_a_store_on_an_unreachable_database_fails_with_the_connection_named(source, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MUT_DEAD_DB", "postgresql://nobody:x@127.0.0.1:9/none")
    dead = SourceRateStore("mut_dead_db", source)
    with pytest.raises(StatusTableError, match="cannot connect to PostgreSQL \\(connection 'mut_dead_db'\\)"):
        dead.take(1)
    dead.close()


def test_a_first_request_before_any_plan_creates_the_schema(pg, source, monkeypatch, pg_url, name):
    """A database without the crawler_ops schema: the first statement creates it."""
    pg.execute(f'CREATE DATABASE "{name}"')
    try:
        monkeypatch.setenv("AIRFLOW_CONN_MUT_FRESH_DB", pg_url.rsplit("/", 1)[0] + f"/{name}")
        fresh = SourceRateStore("mut_fresh_db", source)
        try:
            assert fresh.take(1).rate == 20
        finally:
            fresh.close()
    finally:
        pg.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_failing_statement_closes_the_connection_and_names_postgresql(store, monkeypatch):
    store.take(1)
    monkeypatch.setattr(ratelimit, "read_sql", lambda name: "SELECT no_such_function()")
    with pytest.raises(StatusTableError, match="PostgreSQL failed"):
        store.take(1)
    assert "db" not in store.__dict__


def test_limiters_are_shared_per_connection_and_limits(source, monkeypatch):
    monkeypatch.setattr(ratelimit, "_limiters", {})
    limiter = limiter_for(source, DB_CONN)
    assert isinstance(limiter, SourceLimiter) and isinstance(limiter.bucket, SourceRateStore)
    assert limiter.bucket.hook.postgres_conn_id == DB_CONN
    assert limiter_for(source, DB_CONN) is limiter
    assert limiter_for(source.model_copy(update={"deadline_s": 4}), DB_CONN) is not limiter
    assert limiter_for(source, None) is None
    unlimited = source.model_copy(update={"requests_per_s": None, "max_in_flight": 2})
    bounded = limiter_for(unlimited, DB_CONN)
    assert bounded is not None and bounded.bucket is None
    assert limiter_for(unlimited.model_copy(update={"max_in_flight": None}), DB_CONN) is None


def test_the_rate_grows_back_by_requests_per_s_over_rate_recovery_s_each_second(pg, store, source):
    store.take(1)
    pg.execute(
        "UPDATE crawler_ops.source_rate SET rate = 10, rate_at = extract(epoch from clock_timestamp()) - 2 "
        "WHERE source = %s",
        (source.conn_id,),
    )
    assert store.take(1).rate == pytest.approx(14, abs=0.1), "20 / 10 s more each second"


def test_a_row_holding_a_slot_beyond_any_pause_is_pulled_back(pg, store, source):
    store.take(1)
    pg.execute(
        "UPDATE crawler_ops.source_rate SET next_slot = next_slot + 1e9, rate_at = rate_at + 1e9 WHERE source = %s",
        (source.conn_id,),
    )
    grant = store.take(1)
    assert grant.count == 0
    assert grant.first - grant.now == pytest.approx(53, abs=0.5), "max_retry_after_s + deadline_s ahead at most"


def test_a_take_reserves_no_more_than_wanted(store):
    assert store.take(2).count == 2
    assert store.hook.task_id == f"source {store.source.conn_id}", "errors name the source connection"


def test_a_pacing_row_that_cannot_be_read_even_on_a_new_connection_fails_naming_it(store, monkeypatch):
    store.take(1)
    monkeypatch.setattr(ratelimit, "read_sql", lambda name: "SELECT 1 WHERE false")
    with pytest.raises(StatusTableError, match=f"no row of source '{store.source.conn_id}' in crawler_ops.source_rate"):
        store.take(1)


def test_a_take_uses_the_row_of_its_first_statement_on_the_open_connection(store):
    store.take(1)
    pid = store.db.info.backend_pid
    assert store.take(2).count == 2
    assert store.db.info.backend_pid == pid, "a row read on the first try needs no new connection"


@contextmanager
def row_locked(pg: psycopg.Connection[Any], source: SourceConfig) -> Iterator[None]:
    """Another session holds the source's pacing row locked for the duration of the block."""
    with pg.transaction():
        pg.execute("SELECT 1 FROM crawler_ops.source_rate WHERE source = %s FOR UPDATE", (source.conn_id,))
        yield


def test_a_pacing_row_locked_by_another_session_fails_the_request_naming_the_source_and_the_lock_timeout(
    pg, store, source
):
    store.take(1)
    pid = store.db.info.backend_pid
    # The store's own lock_timeout is lowered on its connection, so the test need not wait 10 s for it; the message
    # names the configured one.
    store.db.execute("SET lock_timeout = '50ms'")
    with row_locked(pg, source), pytest.raises(StatusTableError) as failed:
        store.take(1)
    assert str(failed.value) == (
        f"PostgreSQL gave up on the pacing of source '{source.conn_id}': its row in crawler_ops.source_rate stayed "
        "locked longer than 10s (lock_timeout): another session holds it (canceling statement due to lock timeout)"
    )
    assert isinstance(failed.value.__cause__, psycopg.errors.LockNotAvailable)
    assert store.db.info.backend_pid == pid, "a timeout keeps the connection, which is fine"
    assert store.take(1).count == 1, "the row is handed out again once the lock is released"


def test_a_statement_on_the_pacing_row_running_too_long_fails_the_request_naming_the_statement_timeout(
    pg, store, source
):
    store.take(1)
    # A statement waiting on the held row lock with no lock_timeout runs until its (lowered) statement_timeout.
    store.db.execute("SET lock_timeout = 0")
    store.db.execute("SET statement_timeout = '50ms'")
    with row_locked(pg, source), pytest.raises(StatusTableError) as failed:
        store.throttle(None)
    assert str(failed.value) == (
        f"PostgreSQL gave up on the pacing of source '{source.conn_id}': a statement on its row ran longer than 30s "
        "(statement_timeout) (canceling statement due to statement timeout)"
    )
    assert isinstance(failed.value.__cause__, psycopg.errors.QueryCanceled)


def test_reset_limiters_forgets_them_and_closes_each_bucket_connection(source, monkeypatch):
    monkeypatch.setattr(ratelimit, "_limiters", {})
    limiter = limiter_for(source, DB_CONN)
    bounded = limiter_for(source.model_copy(update={"requests_per_s": None, "max_in_flight": 2}), DB_CONN)
    assert limiter is not None and isinstance(limiter.bucket, SourceRateStore)
    assert bounded is not None and bounded.bucket is None
    limiter.bucket.take(1)
    db = limiter.bucket.db
    reset_limiters()
    assert db.closed, "the bucket's connection is closed"
    assert "db" not in limiter.bucket.__dict__
    assert ratelimit._limiters == {}
    assert limiter_for(source, DB_CONN) is not limiter
