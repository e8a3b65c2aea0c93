"""Requests in flight to a source connection, bounded over every process and shared fairly between them.

The rule: at no moment do more than ``source.max_in_flight`` requests to a source connection wait for their answer,
counted over every task, run and worker on it; a request holds a *permit* from just before it is sent until its
answer is read, and no longer (not while it backs off, not while its page is filtered or published). PostgreSQL
(``crawler_ops.source_flight``, one row per process that sends; ``crawler_ops.settle_flight``) hands the permits out:

- a process asks for what its threads want and is given up to that, from the permits free;
- while another process waits, none is given more than its fair share (``max_in_flight`` / processes that want
  any, at least one), and one that holds more gives its surplus back as its requests finish, so a chunk with eight
  fetch threads does not starve the plan of another task that needs one request;
- a permit freed in a process that has a thread waiting goes to that thread without a round trip, unless another
  process waits; each request returns its permit in one round trip when it finishes;
- a process killed while it held permits frees them after :func:`lease_s` (it refreshes its row on every call);
- a request that gets no permit within ``source.deadline_s`` fails at once with
  :class:`~crawler_ops.errors.SourcePausedError`, retriable, as one that gets no rate slot does.

Each step of a crawl (plan, crawl_chunk) therefore takes one slot of the connection's Airflow pool, which bounds how
many steps of the source run at once (:mod:`crawler_ops.ops.pools`), and holds permits only for what it sends.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any, Protocol

import psycopg

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourcePausedError, StatusTableError
from crawler_ops.hooks.store.db import CrawlerDbHook, row_connection
from crawler_ops.hooks.store.sqlfiles import read_sql

log = logging.getLogger(__name__)

#: A thread without a permit asks PostgreSQL again after about this long (unless a permit of its process frees first).
POLL_S = 0.1
#: A round trip waits at most this long for the source's lock, and runs at most this long.
LOCK_TIMEOUT_MS = 10_000
STATEMENT_TIMEOUT_MS = 30_000


def lease_s(source: SourceConfig) -> float:
    """How long a process's permits outlive its last call: longer than any one request may take (every request
    ends within ``deadline_s``), with a margin for a process under load."""
    return 2 * source.deadline_s + 30


class PermitStore(Protocol):
    """Where a process's permits come from (:class:`SourceFlightStore` in PostgreSQL)."""

    def settle(self, busy: int, wants: int) -> int: ...

    def close(self) -> None: ...


class SourceFlightStore:
    """This process's row of a source connection in ``crawler_ops.source_flight``, on an autocommit connection of its
    own: each call is one statement, one round trip.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param source: the source config (connection id, ``max_in_flight``, ``deadline_s``).
    """

    def __init__(self, postgres_conn_id: str, source: SourceConfig) -> None:
        assert source.max_in_flight is not None
        self.hook = CrawlerDbHook(postgres_conn_id, f"source {source.conn_id}")
        self.source = source
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    @cached_property
    def db(self) -> psycopg.Connection[Any]:
        timeouts = {"lock_timeout": f"{LOCK_TIMEOUT_MS}ms", "statement_timeout": f"{STATEMENT_TIMEOUT_MS}ms"}
        return row_connection(self.hook, timeouts, "flight/add_source", {})

    def close(self) -> None:
        db = self.__dict__.pop("db", None)
        if db is not None:
            db.close()

    def settle(self, busy: int, wants: int) -> int:
        """The permits this process holds once settled to ``wants`` (``busy`` of them in use)."""
        params = {
            "source": self.source.conn_id,
            "holder": self.holder,
            "cap": self.source.max_in_flight,
            "busy": busy,
            "wants": wants,
            "lease_s": lease_s(self.source),
        }
        statement = read_sql("flight/settle")
        try:
            try:
                row = self.db.execute(statement, params).fetchone()
            except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
                raise
            except psycopg.OperationalError:  # a connection lost (a server restart): once more on a new one
                self.close()
                row = self.db.execute(statement, params).fetchone()
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
            self.close()
            raise StatusTableError(
                f"PostgreSQL gave up on the requests in flight of source '{self.source.conn_id}' "
                f"({exc.diag.message_primary or exc}): another session holds its lock, or the server is overloaded"
            ) from exc
        except psycopg.Error as exc:
            self.close()
            raise StatusTableError(f"PostgreSQL failed: {exc}") from exc
        assert row is not None
        return int(row[0])


class SharedFlight:
    """The requests in flight of one process to one source connection, within the permits its store gives it; every
    hook on the connection in the process shares it (through :class:`~crawler_ops.hooks.source.ratelimit.
    SourceLimiter`).

    :param store: where the permits come from.
    :param conn_id: the source connection, for errors.
    :param max_wait: seconds a request may wait for a permit (``deadline_s``).
    """

    def __init__(
        self,
        store: PermitStore,
        conn_id: str,
        max_wait: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.conn_id = conn_id
        self.max_wait = max_wait
        self.clock = clock
        self.cond = threading.Condition()
        self.settling = threading.Lock()
        self.held = self.busy = self.waiting = 0

    @contextmanager
    def permit(self) -> Iterator[None]:
        """Hold a permit; the request is sent and its answer read inside the block."""
        self.take()
        try:
            yield
        finally:
            with self.cond:
                self.busy -= 1
            try:
                self.settle()
            except StatusTableError as exc:  # the permit lapses with the lease; the request's own outcome stands
                log.warning("source %s: could not give back a permit: %s", self.conn_id, exc)

    def take(self) -> None:
        deadline = self.clock() + self.max_wait
        with self.cond:
            self.waiting += 1
        try:
            while not self.claim():
                self.settle()
                if self.claim():
                    return
                left = deadline - self.clock()
                if left <= 0:
                    raise self.paused()
                with self.cond:  # a permit this process frees wakes the wait early
                    self.cond.wait(min(left, POLL_S * random.uniform(0.5, 1.5)))
        finally:
            with self.cond:
                self.waiting -= 1

    def claim(self) -> bool:
        """Use a permit the process holds and no thread uses, if any. Never while a settle is under way: PostgreSQL
        settles to the requests in flight it was told of, and one claimed meanwhile would not be counted."""
        with self.settling, self.cond:
            if self.busy < self.held:
                self.busy += 1
                return True
            return False

    def settle(self) -> None:
        """One round trip: the permits held, settled to what the threads want now."""
        with self.settling:
            with self.cond:
                busy, wants = self.busy, self.busy + self.waiting
            held = self.store.settle(busy, wants)
            with self.cond:
                self.held = held
                self.cond.notify_all()

    def close(self) -> None:
        """Give back what the process holds (its row goes) and close the store's connection."""
        try:
            with self.settling:
                if self.held:
                    self.held = self.store.settle(0, 0)
        except StatusTableError as exc:
            log.warning("source %s: could not give back the permits: %s", self.conn_id, exc)
        finally:
            self.store.close()

    def paused(self) -> SourcePausedError:
        return SourcePausedError(
            f"source connection '{self.conn_id}' has no free request in flight for {self.max_wait:g}s "
            "(source.deadline_s): every permit of source.max_in_flight is held by other tasks' requests; failing the "
            "request instead of waiting",
            retriable=True,
            retry_after=POLL_S,
        )
