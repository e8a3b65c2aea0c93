"""The run history the status page charts, read from the real PostgreSQL: the run in progress (batches done since
it started, of planned) and the last finished runs with records per second and the backlog each left."""

from __future__ import annotations

import threading
import time

import psutil
import psycopg
import pytest

from crawler_ops.config import LoadedConfig
from crawler_ops.hooks.store.hook import CrawlStoreHook
from crawler_ops.ops import status
from tests.support import make_task, query
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def seed_history(pg_uri: str, task: str) -> None:
    """Three finished runs (the newest without a committed watermark), one running run with 3 of 4 planned batches
    done (plus an expired batch its plan recorded, a pending one, and a batch done before it started)."""
    store = CrawlStoreHook("crawler_db", task)
    with store.transaction() as cur:
        store.ensure_schema(cur)
    store.close()
    runs = [
        ("r1", "interval '3 hours'", 10, 1000, 600, 200, 150, 150),
        ("r2", "interval '2 hours'", 4, 1100, 900, 400, 100, 90),
        ("r3", "interval '1 hour'", 5, 1200, None, 50, 10, 10),
    ]
    for run_id, age, seconds, total, new_watermark, fetched, kept, published in runs:
        query(
            pg_uri,
            "INSERT INTO crawler_ops.crawl_run (task_id, run_id, mode, ref_time, total, new_watermark, status, "
            f"started_at, finished_at, fetched, kept, published) VALUES (%s, %s, 'incremental', now(), %s, %s, "
            f"'success', now() - {age}, now() - {age} + make_interval(secs => %s), %s, %s, %s) RETURNING 1",
            task,
            run_id,
            total,
            new_watermark,
            seconds,
            fetched,
            kept,
            published,
        )
    query(
        pg_uri,
        "INSERT INTO crawler_ops.crawl_run (task_id, run_id, mode, ref_time, status, started_at, planned) "
        "VALUES (%s, 'now', 'incremental', now(), 'running', now() - interval '1 minute', 4) RETURNING 1",
        task,
    )
    batches = [
        (0, 2, "interval '2 hours'", False),  # done by an earlier run
        (100, 2, "interval '10 seconds'", False),
        (200, 2, "interval '5 seconds'", False),
        (300, 2, "interval '1 second'", False),
        (400, 0, None, False),
        (500, 2, "interval '30 seconds'", True),
    ]
    for lo, state, age, expired in batches:
        end = f"now() - {age}" if age else "NULL"
        query(
            pg_uri,
            "INSERT INTO crawler_ops.batch_status (id, hi, status, task_name, expired, end_time) "
            f"VALUES (%s, %s, %s, %s, %s, {end}) RETURNING 1",
            lo,
            lo + 100,
            state,
            task,
            expired,
        )


def test_the_history_has_the_run_in_progress_and_the_finished_runs_oldest_first(pg_uri, unique_id, stack):
    seed_history(pg_uri, unique_id)

    found = status.run_history(make_task(unique_id))

    current = found["current_run"]
    assert (current["run_id"], current["planned"], current["done"], current["percent"]) == ("now", 4, 3, 75.0)
    assert [r["run_id"] for r in found["runs"]] == ["r1", "r2", "r3"]
    assert [r["records_per_s"] for r in found["runs"]] == [20.0, 100.0, 10.0]
    assert [r["backlog"] for r in found["runs"]] == [400, 200, None]
    assert [(r["kept"], r["published"]) for r in found["runs"]] == [(150, 150), (100, 90), (10, 10)]


def test_a_task_that_never_ran_has_an_empty_history(unique_id, stack):
    assert status.run_history(make_task(unique_id)) == {"current_run": None, "runs": []}


def test_a_report_waiting_on_a_locked_table_ends_at_its_deadline_and_leaves_no_connection(pg_uri, unique_id, stack):
    """A table lock held elsewhere (a migration, a stuck transaction): the parts waiting on it are the report's
    errors at the deadline, and none of them keeps its thread or its PostgreSQL backend afterwards."""
    seed_history(pg_uri, unique_id)
    loaded = LoadedConfig(tasks=(make_task(unique_id),), errors={})
    before = {t for t in threading.enumerate() if t.name.startswith("status")}
    with psycopg.connect(pg_uri) as holder:
        holder.execute("LOCK TABLE crawler_ops.progress, crawler_ops.crawl_run IN ACCESS EXCLUSIVE MODE")
        report = status.collect(loaded, live=False, history=True, end=time.monotonic() + 0.8)

        # Returned while the lock is still held: only the deadline can have ended the report.
        (row,) = report["tasks"]
        assert row["db_error"] == "no answer within the status deadline of 5s"
        wait_until(
            lambda: (
                not blocked_backends_of_this_process(holder)
                and not {t for t in threading.enumerate() if t.name.startswith("status")} - before
            ),
            10,
            "the parts abandoned at the deadline to give up their PostgreSQL backends and threads",
        )
        holder.rollback()


def blocked_backends_of_this_process(holder: psycopg.Connection) -> list[int]:
    """The backends this process opened that wait on ``holder``'s locks (tests running beside this one, in other
    processes, may wait on them too)."""
    ports = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.laddr}
    rows = holder.execute(
        "SELECT pid, client_port FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
    ).fetchall()
    return [pid for pid, port in rows if port in ports]
