"""PostgreSQL connections a deadline bounds: those the status view's report parts open.

A part of a status report (:func:`crawler_ops.ops.status.gather`) runs in a thread of its own and opens its own
connection through a :class:`~crawler_ops.hooks.store.db.CrawlerDbHook`. Inside :meth:`BoundedSessions.active` each such
connection is opened with a connect timeout, a statement timeout (what is left until the deadline, at most
:data:`STATEMENT_TIMEOUT_MS`) and a lock timeout, and is named :data:`APPLICATION_NAME` in ``pg_stat_activity``.
At the deadline :meth:`BoundedSessions.abort` shuts the socket of every connection still open: the part waiting on
it fails at once and closes it, instead of holding a connection (and a thread) for as long as a lock is held.
"""

from __future__ import annotations

import contextvars
import gc
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

CONNECT_TIMEOUT_S = 2  # libpq's smallest
STATEMENT_TIMEOUT_MS = 3000
LOCK_TIMEOUT_MS = 1000
APPLICATION_NAME = "crawler_ops status"

ACTIVE: contextvars.ContextVar[BoundedSessions | None] = contextvars.ContextVar("bounded_sessions", default=None)


class BoundedSessions:
    """The connections of one status report, opened with timeouts and shut at its deadline.

    :param end: the report's deadline (a monotonic time); None: none, each statement gets the full timeout.
    """

    def __init__(self, end: float | None) -> None:
        self.end = end
        self.lock = threading.Lock()
        self.open: set[psycopg.Connection[Any]] = set()
        self.aborted = False
        self.timed_out = False

    def connect_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` of a connection with the timeouts added (a shorter connect timeout of its own kept)."""
        left_ms = STATEMENT_TIMEOUT_MS if self.end is None else int(1000 * (self.end - time.monotonic()))
        statement_ms = max(100, min(STATEMENT_TIMEOUT_MS, left_ms))
        settings = f"-c statement_timeout={statement_ms} -c lock_timeout={min(LOCK_TIMEOUT_MS, statement_ms)}"
        own_timeout = int(args.get("connect_timeout") or 0)
        return {
            **args,
            "connect_timeout": min(own_timeout, CONNECT_TIMEOUT_S) if own_timeout > 0 else CONNECT_TIMEOUT_S,
            "options": f"{args['options']} {settings}" if args.get("options") else settings,
            "application_name": args.get("application_name") or APPLICATION_NAME,
        }

    def connect(self, create: Callable[[dict[str, Any]], Any], args: dict[str, Any]) -> Any:
        """``create(args)`` with the timeouts, tracked until closed.

        :raises psycopg.OperationalError: it failed, or the report's deadline passed meanwhile.
        """
        try:
            conn = create(self.connect_args(args))
        except psycopg.errors.ConnectionTimeout:
            self.timed_out = True
            raise
        self.opened(conn)
        return conn

    def opened(self, conn: psycopg.Connection[Any]) -> None:
        """Track ``conn`` until it is closed; one that connected after the deadline is closed at once.

        :raises psycopg.OperationalError: the report's deadline has passed.
        """
        with self.lock:
            if not self.aborted:
                self.open.add(conn)
                return
        conn.close()
        raise psycopg.OperationalError("the status report's deadline passed while connecting")

    def close(self, conn: psycopg.Connection[Any]) -> None:
        # Under the lock: abort() must never shut a socket number that a closed connection gave back.
        with self.lock:
            self.open.discard(conn)
            conn.close()

    def abort(self) -> None:
        """Shut the socket of every connection still open (their statements fail at once; the parts close them)."""
        with self.lock:
            self.aborted = True
            for conn in self.open:
                shut(conn)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Connections a :class:`~crawler_ops.hooks.store.db.CrawlerDbHook` opens in this block (this thread) are
        bounded by these sessions."""
        token = ACTIVE.set(self)
        try:
            yield
        finally:
            ACTIVE.reset(token)
            if self.timed_out:
                # psycopg leaves a timed-out attempt's socket in a reference cycle with its error: once the error is
                # handled, close it now rather than at some later collection.
                gc.collect()


def shut(conn: psycopg.Connection[Any]) -> None:
    """Shut ``conn``'s socket without closing its file descriptor, which belongs to the thread using it."""
    try:
        fd = conn.fileno()
    except psycopg.Error:
        return
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the server or the network
