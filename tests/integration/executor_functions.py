"""User functions for executor tests: they record each call in PostgreSQL so tests can count them."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

_local = threading.local()
RELEASE = threading.Event()  # set by the test that hangs calls, when it is done


def _conn() -> psycopg.Connection:
    if getattr(_local, "conn", None) is None:
        _local.conn = psycopg.connect(os.environ["CRAWLER_OPS_PG_URI"], autocommit=True)
    return _local.conn


def record_call(row: dict[str, Any]) -> None:
    """Succeeds; appends (id, pid) to <CRAWLER_OPS_TEST_SCHEMA>.calls in call order."""
    schema = os.environ["CRAWLER_OPS_TEST_SCHEMA"]
    _conn().execute(f'INSERT INTO "{schema}".calls (id, pid) VALUES (%s, %s)', (row["id"], os.getpid()))


def fail_every_tenth(row: dict[str, Any]) -> bool:
    if row["id"] % 10 == 0:
        raise ValueError(f"cannot handle row {row['id']}")
    return True


def refuse_odd(row: dict[str, Any]) -> tuple[int, int]:
    """The old contract: (id, status) with status 0 meaning failure."""
    return row["id"], 0 if row["id"] % 2 else 1


def sleep_then_succeed(row: dict[str, Any]) -> None:
    time.sleep(float(os.environ.get("EXECUTOR_TEST_SLEEP_S", "60")))


def hang_on_row_two(row: dict[str, Any]) -> None:
    """Hangs on row 2 (until the test sets RELEASE); records the other calls."""
    if row["id"] == 2:
        RELEASE.wait(120)
        return
    record_call(row)


def record_call_slowly(row: dict[str, Any]) -> None:
    """Records the call after 20 ms of work, so concurrent workers overlap in time."""
    time.sleep(0.02)
    record_call(row)
