"""Requests in flight to a source connection, bounded over every process by permits in PostgreSQL
(crawler_ops.hooks.source.flight): the bound, the fair share while another process waits, the surplus given back
as requests finish, a killed process's permits freed after its lease, and many threads of several "processes" (each
a store of its own, as a process has) never passing the bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourcePausedError
from crawler_ops.hooks.source import ratelimit
from crawler_ops.hooks.source.flight import SharedFlight, SourceFlightStore
from crawler_ops.hooks.source.ratelimit import limiter_for
from tests.integration.logic.conftest import DB_CONN

pytestmark = pytest.mark.integration

CAP = 4


@pytest.fixture
def source(pg: psycopg.Connection[Any], crawler_schema: None, name: str) -> Iterator[SourceConfig]:
    """A source connection id of this test's own with 4 requests in flight; its rows are removed afterwards."""
    yield SourceConfig(conn_id=name, requests_per_s=None, max_in_flight=CAP, deadline_s=2)
    pg.execute("DELETE FROM crawler_ops.source_flight WHERE source = %s", (name,))


@pytest.fixture
def stores(source: SourceConfig) -> Iterator[list[SourceFlightStore]]:
    """Three processes' stores on the source."""
    made = [SourceFlightStore(DB_CONN, source) for _ in range(3)]
    yield made
    for store in made:
        store.close()


def rows(pg: psycopg.Connection[Any], source: SourceConfig) -> dict[str, tuple[int, int]]:
    found = pg.execute(
        "SELECT holder, held, wants FROM crawler_ops.source_flight WHERE source = %s", (source.conn_id,)
    ).fetchall()
    return {holder: (held, wants) for holder, held, wants in found}


def test_a_process_alone_gets_what_it_wants_up_to_the_bound_and_gives_back_what_it_no_longer_needs(pg, stores, source):
    a = stores[0]
    assert a.settle(0, 3) == 3
    assert a.settle(0, 9) == CAP, "never more than max_in_flight"
    assert a.settle(2, 2) == 2, "the surplus goes back"
    assert rows(pg, source) == {a.holder: (2, 2)}
    assert a.settle(0, 0) == 0
    assert rows(pg, source) == {}, "a holder wanting and holding nothing is gone"


def test_while_another_process_waits_none_holds_more_than_its_fair_share_and_the_surplus_goes_back(pg, stores, source):
    a, b = stores[0], stores[1]
    assert a.settle(0, 8) == CAP, "nobody else wants any: all of them"
    assert b.settle(0, 1) == 0, "none free: b waits"
    # a's requests finish one by one; with b waiting, a keeps its fair share (4 / 2) and no more.
    assert a.settle(3, 8) == 3, "a permit in flight is never taken back"
    assert b.settle(0, 1) == 1
    assert a.settle(2, 8) == 3, "b has what it wants, nobody waits: a keeps the rest"
    assert b.settle(1, 2) == 1, "b wants a second: none free yet"
    assert a.settle(2, 8) == 2, "b waits: a gives back down to its share"
    assert b.settle(1, 2) == 2
    assert rows(pg, source) == {a.holder: (2, 8), b.holder: (2, 2)}


def test_three_processes_wanting_more_than_the_bound_each_end_up_with_a_share(pg, stores, source):
    a, b, c = stores
    assert a.settle(0, 8) == CAP
    assert (b.settle(0, 8), c.settle(0, 8)) == (0, 0)
    assert a.settle(0, 8) == 1, "three want some: a's share is 4 // 3"
    assert (b.settle(0, 8), c.settle(0, 8)) == (1, 1)
    held = {h: n for h, (n, _) in rows(pg, source).items()}
    assert sorted(held.values()) == [1, 1, 1] and sum(held.values()) <= CAP


def test_a_killed_process_frees_its_permits_after_its_lease(pg, stores, source):
    a, b = stores[0], stores[1]
    assert a.settle(4, 4) == CAP
    assert b.settle(0, 1) == 0
    pg.execute(
        "UPDATE crawler_ops.source_flight SET seen_at = seen_at - 1000 WHERE source = %s AND holder = %s",
        (source.conn_id, a.holder),
    )
    assert b.settle(0, 1) == 1, "a's row lapsed: its permits are free"
    assert a.holder not in rows(pg, source)
    assert a.settle(2, 2) == 2, "a process whose row lapsed keeps the permits of its requests in flight"


def test_a_request_that_gets_no_permit_within_the_deadline_fails_retriable(stores, source):
    hog, waiting = stores[0], stores[1]
    assert hog.settle(CAP, CAP) == CAP
    flight = SharedFlight(waiting, source.conn_id, max_wait=0.3)
    started = time.monotonic()
    with pytest.raises(SourcePausedError, match="no free request in flight") as raised, flight.permit():
        pass
    assert raised.value.retriable
    assert 0.3 <= time.monotonic() - started < 2


def test_threads_of_three_processes_never_have_more_in_flight_than_the_bound_and_all_get_through(pg, source):
    flights = [SharedFlight(SourceFlightStore(DB_CONN, source), source.conn_id, max_wait=20) for _ in range(3)]
    lock = threading.Lock()
    now = peak = done = 0

    def send(flight: SharedFlight) -> None:
        nonlocal now, peak, done
        for _ in range(5):
            with flight.permit():
                with lock:
                    now += 1
                    peak = max(peak, now)
                time.sleep(0.01)
                with lock:
                    now -= 1
                    done += 1

    threads = [threading.Thread(target=send, args=(f,)) for f in flights for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for flight in flights:
        flight.close()

    assert done == 3 * 4 * 5
    assert 2 <= peak <= CAP, peak
    assert rows(pg, source) == {}, "every permit went back"


def test_a_limiter_on_a_bounded_connection_takes_its_permits_from_postgresql(source, monkeypatch):
    monkeypatch.setattr(ratelimit, "_limiters", {})
    limiter = limiter_for(source, DB_CONN)
    assert limiter is not None and isinstance(limiter.flight, SharedFlight) and limiter.permits is None
    assert limiter_for(source.model_copy(update={"max_in_flight": None}), DB_CONN) is None
