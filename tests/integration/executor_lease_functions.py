"""User functions for the executor lease, quota and feature tests. Each call is logged in
<CRAWLER_OPS_TEST_SCHEMA>.calls with the calling process and when it started and finished, so tests can tell
who ran what, when, and how often."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

_local = threading.local()


def _conn() -> psycopg.Connection:
    if getattr(_local, "conn", None) is None:
        _local.conn = psycopg.connect(os.environ["CRAWLER_OPS_PG_URI"], autocommit=True)
    return _local.conn


def _log_start(row_id: int) -> int:
    schema = os.environ["CRAWLER_OPS_TEST_SCHEMA"]
    statement = f'INSERT INTO "{schema}".calls (id, pid) VALUES (%s, %s) RETURNING n'
    return int(_conn().execute(statement, (row_id, os.getpid())).fetchone()[0])


def _log_end(n: int) -> None:
    schema = os.environ["CRAWLER_OPS_TEST_SCHEMA"]
    _conn().execute(f'UPDATE "{schema}".calls SET finished_at = clock_timestamp() WHERE n = %s', (n,))


def timed_call(row: dict[str, Any]) -> None:
    """Logs the call, sleeps as EXECUTOR_TEST_SLEEPS says for the row's id (``id=seconds,...``; ``*`` for every
    row), logs its end."""
    n = _log_start(row["id"])
    sleeps = dict(item.split("=") for item in os.environ.get("EXECUTOR_TEST_SLEEPS", "").split(",") if item)
    time.sleep(float(sleeps.get(str(row["id"]), sleeps.get("*", 0))))
    _log_end(n)


def udf(data):  # the old executor sample function, unchanged
    print(data)
    return data[0][0], 1


def logged_old_udf(data):  # an old-style function (row as [tuple], returns (id, status)) that logs its calls
    n = _log_start(data[0][0])
    _log_end(n)
    return data[0][0], 0 if data[0][0] % 5 == 0 else 1


def fail_always(row: dict[str, Any]) -> None:
    raise RuntimeError(f"row {row['id']} cannot be handled")
