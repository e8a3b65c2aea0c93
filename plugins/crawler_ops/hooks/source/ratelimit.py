"""Per-source rate limits, shared by every task, run and worker that uses one source connection.

The rule: requests to a source connection are sent at most at its shared rate, which never exceeds
``source.requests_per_s``, counted over every process on every worker. PostgreSQL (``crawler_ops.source_rate``, one
row per connection id) hands out send times, *slots*, ``1 / rate`` apart on its own clock, so workers' clocks do not
matter. A process reserves the slots due within :data:`HORIZON_S` in one round trip and gives them to its threads in
order; a slot not used within :data:`STALE_S` of its time is dropped, never saved up, and an idle source earns no
burst. So in any one second a source receives at most ``requests_per_s * (1 + STALE_S) + 1`` requests.

A 429, or any answer with Retry-After, slows everyone down (AIMD): no slot is handed out before the Retry-After has
passed (a process may still send the few it had reserved, within :data:`HORIZON_S`),
and the shared rate is halved, at most once per :data:`CUT_EVERY_S` (the answers to requests already in flight are
the same signal), never below ``min_requests_per_s``. The pause is validated and at most ``max_retry_after_s``, in
Python and again in SQL, so no answer can store a slot years ahead. The rate then grows back by
``requests_per_s / rate_recovery_s`` each second (additive increase) once the Retry-After has passed, up to
``requests_per_s``. Slots a process reserved before the 429 are dropped.

No wait for a slot outlives a request's deadline: PostgreSQL hands out no slot further away than ``deadline_s``
(it answers how far the next one is, reserving nothing) and the request fails at once with
:class:`~crawler_ops.errors.SourcePausedError`, retriable. A row whose next slot or growth time lies further ahead
than ``max_retry_after_s + deadline_s`` (stored by a version without the cap) is pulled back to that by the next
statement: it heals instead of failing every task on the connection.

The pacing row is read on a PostgreSQL connection of the process's own: a connection lost (a server restart, a
terminated backend) is replaced within the same request. A row lock held longer than :data:`LOCK_TIMEOUT_MS`, or a
statement running longer than :data:`STATEMENT_TIMEOUT_MS`, fails the request at once with
:class:`~crawler_ops.errors.StatusTableError` naming the task and the source (the chunk fails, its batches in flight
go back for the next attempt) instead of stalling every fetch thread of the process.

``max_in_flight`` bounds the requests in flight at once over every process, with permits from PostgreSQL shared
fairly between the processes that send (:mod:`.flight`).

``requests_per_s: null`` turns the rate limit off (no PostgreSQL round trip at all), ``max_in_flight: null`` the
bound on requests in flight.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import psycopg

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourcePausedError, StatusTableError
from crawler_ops.hooks.source.flight import SharedFlight, SourceFlightStore
from crawler_ops.hooks.store.db import CrawlerDbHook, row_connection
from crawler_ops.hooks.store.sqlfiles import read_sql

log = logging.getLogger(__name__)

#: One round trip reserves the slots due within this many seconds (at 20 requests/s: 5 slots).
HORIZON_S = 0.25
#: A slot whose time passed longer ago than this is dropped: sending it late could bunch it with later ones.
STALE_S = 0.1
#: 429s within this many seconds of a halving do not halve the rate again.
CUT_EVERY_S = 1.0
#: A round trip waits at most this long for the source's row lock, and runs at most this long.
LOCK_TIMEOUT_MS = 10_000
STATEMENT_TIMEOUT_MS = 30_000
#: What PostgreSQL raises when one of them fires: the request fails at once, on the same connection.
TIMEOUTS = (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled)


@dataclass(frozen=True)
class Grant:
    """Slots from one round trip: ``count`` send times ``first + i * interval`` on PostgreSQL's clock, which read
    ``now`` when they were granted; ``rate`` is the shared rate they were paced at."""

    now: float
    first: float
    interval: float
    count: int
    rate: float

    def local_times(self, received: float) -> list[float]:
        """The send times on this process's clock, ``received`` being when the grant arrived (a little after
        PostgreSQL's ``now``, so the slots fall a little late, never early); a slot already due is due on arrival."""
        return [received + max(0.0, self.first + i * self.interval - self.now) for i in range(self.count)]


class Bucket(Protocol):
    """Where the slots of a source come from (:class:`SourceRateStore` in PostgreSQL)."""

    def take(self, want: int) -> Grant: ...

    def throttle(self, retry_after: float | None) -> tuple[float, bool]: ...

    def close(self) -> None: ...


class SourceRateStore:
    """The shared pacing row of one source connection in PostgreSQL, on an autocommit connection of its own: each
    call is one statement, one round trip, and holds the row lock only while that statement runs.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param source: the source config (connection id, requests_per_s and the AIMD settings).
    """

    def __init__(self, postgres_conn_id: str, source: SourceConfig) -> None:
        assert source.requests_per_s is not None
        self.hook = CrawlerDbHook(postgres_conn_id, f"source {source.conn_id}")
        self.source = source
        self.ceiling = source.requests_per_s

    @cached_property
    def db(self) -> psycopg.Connection[Any]:
        # Every fetch thread of the process waits on this connection: a held row lock or a hung server must fail a
        # request, not stall them all.
        timeouts = {"lock_timeout": f"{LOCK_TIMEOUT_MS}ms", "statement_timeout": f"{STATEMENT_TIMEOUT_MS}ms"}
        params = {"source": self.source.conn_id, "ceiling": self.ceiling}
        return row_connection(self.hook, timeouts, "ratelimit/add_source", params)

    def close(self) -> None:
        """Close the connection (a later call opens another)."""
        db = self.__dict__.pop("db", None)
        if db is not None:
            db.close()

    def run(self, name: str, **params: Any) -> tuple[Any, ...]:
        source = self.source
        params = {
            "source": source.conn_id,
            "ceiling": self.ceiling,
            "now": None,
            "max_wait_s": source.deadline_s,
            "max_pause_s": source.max_retry_after_s,
            "max_ahead_s": source.max_retry_after_s + source.deadline_s,
            **params,
        }
        try:
            try:
                row = self.db.execute(read_sql(f"ratelimit/{name}"), params).fetchone()
            except TIMEOUTS:  # the connection is fine: another try would only wait as long again
                raise
            except psycopg.OperationalError:  # a connection lost (a server restart): once more on a new one
                row = None
            if row is None:  # or the row was deleted meanwhile: it starts again as on first use
                self.close()
                row = self.db.execute(read_sql(f"ratelimit/{name}"), params).fetchone()
        except TIMEOUTS as exc:
            raise StatusTableError(timed_out(source.conn_id, exc)) from exc
        except psycopg.Error as exc:
            self.close()
            raise StatusTableError(f"PostgreSQL failed: {exc}") from exc
        if row is None:
            raise StatusTableError(f"no row of source '{self.source.conn_id}' in crawler_ops.source_rate")
        return tuple(row)

    def take(self, want: int) -> Grant:
        now, first, interval, count, rate = self.run(
            "take", want=want, horizon_s=HORIZON_S, recovery_s=self.source.rate_recovery_s
        )
        return Grant(now, first, interval, count, rate)

    def opens_in(self) -> float:
        """Seconds until the connection's next request slot is due (0: now)."""
        (seconds,) = self.run("open_in")
        return float(seconds)

    def throttle(self, retry_after: float | None) -> tuple[float, bool]:
        rate, cut = self.run(
            "throttle",
            retry_after_s=retry_after,
            cut_every_s=CUT_EVERY_S,
            floor=self.source.min_requests_per_s,
            recovery_s=self.source.rate_recovery_s,
        )
        return float(rate), bool(cut)


def timed_out(conn_id: str, exc: psycopg.Error) -> str:
    """What a lock or statement timeout on the pacing row of ``conn_id`` means."""
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        why = (
            f"its row in crawler_ops.source_rate stayed locked longer than {LOCK_TIMEOUT_MS / 1000:g}s (lock_timeout): "
            "another session holds it"
        )
    else:
        why = f"a statement on its row ran longer than {STATEMENT_TIMEOUT_MS / 1000:g}s (statement_timeout)"
    return f"PostgreSQL gave up on the pacing of source '{conn_id}': {why} ({exc.diag.message_primary or exc})"


class SourceLimiter:
    """Paces and bounds one process's requests to one source connection; every hook on it in the process shares it
    (:func:`limiter_for`).

    :param source: the source config (connection id and limits).
    :param bucket: where slots come from; None when the rate is not limited.
    :param flight: where permits for requests in flight come from; None: a semaphore of ``max_in_flight`` in this
        process alone (tests).
    :param clock: a monotonic clock (tests pass their own, with ``sleep``).
    """

    def __init__(
        self,
        source: SourceConfig,
        bucket: Bucket | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        flight: SharedFlight | None = None,
    ) -> None:
        self.conn_id = source.conn_id
        self.ceiling = source.requests_per_s
        self.bucket = bucket if self.ceiling is not None else None
        self.want = math.ceil((self.ceiling or 0) * HORIZON_S) + 1
        self.flight = flight
        self.permits = (
            threading.BoundedSemaphore(source.max_in_flight) if source.max_in_flight and flight is None else None
        )
        self.max_wait = source.deadline_s
        self.max_pause = source.max_retry_after_s
        self.clock = clock
        self.sleep = sleep
        self.slots: deque[float] = deque()
        self.lock = threading.Lock()
        self.rate = self.ceiling
        self.throttles = 0
        self.users = 0

    def attach(self) -> None:
        """A hook starts using the limiter."""
        with self.lock:
            self.users += 1

    def detach(self) -> None:
        """A hook is done with it; the last one closes the bucket's connection (the next user opens another), so a
        long-lived process does not keep a connection per source it once crawled."""
        with self.lock:
            self.users -= 1
            if self.users <= 0 and self.bucket is not None:
                self.bucket.close()
            if self.users <= 0 and self.flight is not None:
                self.flight.close()

    @contextmanager
    def request(self, max_wait: float | None = None) -> Iterator[None]:
        """Hold an in-flight permit and wait for a slot, at most ``max_wait`` seconds (at most ``deadline_s``); the
        request is sent inside the block."""
        permit: AbstractContextManager[Any] = (
            self.flight.permit() if self.flight is not None else self.permits or nullcontext()
        )
        with permit:
            self.wait_for_slot(self.max_wait if max_wait is None else min(max_wait, self.max_wait))
            yield

    def wait_for_slot(self, max_wait: float) -> None:
        if self.bucket is None:
            return
        while True:
            with self.lock:
                at, throttles = self.next_slot(), self.throttles
            delay = at - self.clock()
            if delay > max_wait:
                raise self.paused(delay, max_wait)
            if delay > 0:
                self.sleep(delay)
            if self.clock() - at <= STALE_S and self.throttles == throttles:
                return
            # Woken too late (a slot used now could bunch with the next ones), or the source complained meanwhile
            # (the slot was reserved before): it is dropped, another one taken.

    def next_slot(self) -> float:
        """The next unused slot, reserving more from the bucket when none is left (called holding the lock)."""
        assert self.bucket is not None
        now = self.clock()
        while self.slots and now - self.slots[0] > STALE_S:
            self.slots.popleft()
        if not self.slots:
            grant = self.bucket.take(self.want)
            if grant.count == 0:  # none before the deadline: the bucket says how far the next one is
                raise self.paused(grant.first - grant.now, self.max_wait)
            self.slots.extend(grant.local_times(self.clock()))
            self.note_rate(grant.rate)
        return self.slots.popleft()

    def paused(self, wait: float, max_wait: float) -> SourcePausedError:
        bound = "source.deadline_s" if max_wait >= self.max_wait else "source.defer_after_s"
        return SourcePausedError(
            f"source connection '{self.conn_id}' has no request slot for {wait:.3g}s (a Retry-After, or a queue of "
            f"requests), longer than {bound} ({max_wait:g}s); failing the request instead of waiting",
            retriable=True,
            retry_after=wait,
        )

    def note_rate(self, rate: float) -> None:
        if self.rate is not None and self.ceiling is not None and self.rate < self.ceiling <= rate:
            log.info("source %s: shared rate back at %.3g requests/s", self.conn_id, rate)
        self.rate = rate

    def throttle(self, retry_after: float | None) -> None:
        """The source answered 429 or sent Retry-After: pause and slow down every worker on the connection."""
        if self.bucket is None:
            return
        # Validated where the header is read, and again here: this pause holds up every worker on the connection.
        if retry_after is not None:
            retry_after = self.max_pause if math.isnan(retry_after) else min(max(0.0, retry_after), self.max_pause)
        with self.lock:
            self.slots.clear()  # reserved before the source complained
            rate, cut = self.bucket.throttle(retry_after)
            self.rate = rate
            self.throttles += 1
        pause = f"; no request for {retry_after:.3g}s" if retry_after else ""
        change = "halved to" if cut else "stays at"
        (log.warning if cut else log.info)(
            "source %s: 429 / Retry-After, shared rate %s %.3g requests/s%s", self.conn_id, change, rate, pause
        )


_limiters: dict[tuple[Any, ...], SourceLimiter] = {}
_limiters_lock = threading.Lock()


def limiter_for(source: SourceConfig, postgres_conn_id: str | None) -> SourceLimiter | None:
    """This process's limiter of a source connection, shared by every hook with the same limits on it; None when
    nothing is limited, or without a crawler database to share the rate through."""
    if postgres_conn_id is None or (source.requests_per_s is None and source.max_in_flight is None):
        return None
    key = (
        postgres_conn_id,
        source.conn_id,
        source.requests_per_s,
        source.max_in_flight,
        source.min_requests_per_s,
        source.rate_recovery_s,
        source.deadline_s,
        source.max_retry_after_s,
    )
    with _limiters_lock:
        limiter = _limiters.get(key)
        if limiter is None:
            bucket = SourceRateStore(postgres_conn_id, source) if source.requests_per_s is not None else None
            flight = None
            if source.max_in_flight is not None:
                flight = SharedFlight(SourceFlightStore(postgres_conn_id, source), source.conn_id, source.deadline_s)
            limiter = _limiters[key] = SourceLimiter(source, bucket, flight=flight)
        return limiter


def reset_limiters() -> None:
    """Forget this process's limiters (their slots, pace and throttling), closing their database connections: a
    process that starts over, such as a test, meets fresh ones."""
    with _limiters_lock:
        limiters = list(_limiters.values())
        _limiters.clear()
    for limiter in limiters:
        if limiter.bucket is not None:
            limiter.bucket.close()
        if limiter.flight is not None:
            limiter.flight.close()
