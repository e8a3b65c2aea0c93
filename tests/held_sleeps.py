"""A check every test session runs: no crawler_ops code sleeps while its thread holds a PostgreSQL transaction open.

A transaction may hold row locks (a token row, a status row, a rate row) that other workers wait for; a sleep inside
one makes them wait that long too, and failures pile up behind it. The session wraps psycopg's
``Connection.transaction`` to count, per thread, the transactions open, and ``time.sleep`` to note a sleep of
crawler_ops code made while one is: each test fails when it caused one (:func:`take`).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_open = threading.local()
_found: list[str] = []
_lock = threading.Lock()
_installed = False


def install() -> None:
    """Wrap psycopg's transactions and ``time.sleep`` once per process."""
    global _installed
    if _installed:
        return
    import psycopg

    real_transaction = psycopg.Connection.transaction
    real_sleep = time.sleep

    @contextmanager
    def transaction(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_transaction(self, *args, **kwargs) as tx:
            depth = getattr(_open, "depth", 0)
            _open.depth = depth + 1
            try:
                yield tx
            finally:
                _open.depth = depth

    def sleep(seconds: float) -> None:
        if seconds > 0 and getattr(_open, "depth", 0):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("crawler_ops"):
                stack = "".join(traceback.format_stack(limit=10)[:-1])
                with _lock:
                    _found.append(f"{caller} slept {seconds:g}s with a transaction open:\n{stack}")
        real_sleep(seconds)

    psycopg.Connection.transaction = transaction  # type: ignore[method-assign]
    time.sleep = sleep
    _installed = True


def take() -> list[str]:
    """The sleeps found since the last call."""
    with _lock:
        found = list(_found)
        _found.clear()
    return found
