"""Helpers for the executor lease, quota and feature tests: a source table and a call log in a test schema,
executor configs, and workers in their own processes that can start claiming together."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from crawler_ops.config import ExecutorTaskConfig
from tests.support import query, runner_result, spawn_runner
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = "tests.integration.executor_lease_functions"


def make_source(pg_uri: str, schema: str, categories: list[str]) -> None:
    """``<schema>.source_data_table`` with one row per entry of ``categories`` (ids from 1, in that order)
    and the call log ``<schema>.calls``; the functions find the schema in CRAWLER_OPS_TEST_SCHEMA (set here for
    the workers this process starts; the suite restores the environment after each test)."""
    os.environ["CRAWLER_OPS_TEST_SCHEMA"] = schema
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE "{schema}".source_data_table (id int PRIMARY KEY, category varchar(50), '
            "province varchar(50) NOT NULL, city varchar(50))"
        )
        conn.execute(
            f'INSERT INTO "{schema}".source_data_table (id, category, province, city) '
            "SELECT n, c, '省' || (n %% 7), '市' || n FROM unnest(%s::text[]) WITH ORDINALITY AS u(c, n)",
            (categories,),
        )
        conn.execute(
            f'CREATE TABLE "{schema}".calls (n bigserial PRIMARY KEY, id int NOT NULL, pid int NOT NULL, '
            "started_at timestamptz NOT NULL DEFAULT clock_timestamp(), finished_at timestamptz)"
        )


def executor(schema: str, name: str, **overrides: Any) -> ExecutorTaskConfig:
    base: dict[str, Any] = {
        "name": name,
        "source_table": f"{schema}.source_data_table",
        "status_table": f"{schema}.status_table",
        "output_fields": ["id", "province", "city"],
        "function": f"{FUNCTIONS}.timed_call",
        "cycle_index": 100_000,
        "workers": 1,
        "schedule": None,
        "retries": 0,
    }
    return ExecutorTaskConfig.model_validate({**base, **overrides})


def spawn(
    cfg: ExecutorTaskConfig, run_id: str, index: int, go: Path | None = None, **env: str
) -> subprocess.Popen[str]:
    """One worker in its own process; with ``go``, it waits for that file before claiming."""
    spec = {"config": cfg.model_dump(mode="json"), "run_id": run_id, "index": index, "go": str(go) if go else None}
    return spawn_runner("executor_worker_process.py", spec, **env)


def run_together(cfg: ExecutorTaskConfig, run_id: str, workers: int, folder: Path, **env: str) -> list[dict[str, int]]:
    """``workers`` worker processes of one run that connect first and then start claiming at the same moment."""
    go = folder / f"go-{run_id}"
    procs = [spawn(cfg, run_id, index, go, **env) for index in range(workers)]
    wait_for(lambda: all(Path(f"{go}.ready.{i}").exists() for i in range(workers)), 120, "workers ready")
    go.touch()
    return [runner_result(proc) for proc in procs]


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """:func:`tests.waiting.wait_until` under its earlier name."""
    return wait_until(check, timeout, what)


def lease_start(pg_uri: str, schema: str, task: str, row_id: int) -> datetime:
    """When the row's lease was last taken or renewed (the database's clock)."""
    ((started,),) = query(
        pg_uri, f'SELECT start_time FROM "{schema}".status_table WHERE task_name = %s AND id = %s', task, row_id
    )
    return started


def lapsed(pg_uri: str, since: datetime, period: float) -> bool:
    """Whether a lease taken at ``since`` has run out by the database's clock."""
    ((out,),) = query(pg_uri, "SELECT now() - make_interval(secs => %s) > %s", period, since)
    return bool(out)


def calls(pg_uri: str, schema: str) -> list[tuple[int, int, Any, Any]]:
    """(id, pid, started_at, finished_at) of every call, in call order."""
    return query(pg_uri, f'SELECT id, pid, started_at, finished_at FROM "{schema}".calls ORDER BY n')


def call_counts(pg_uri: str, schema: str) -> dict[int, int]:
    return dict(query(pg_uri, f'SELECT id, count(*) FROM "{schema}".calls GROUP BY id'))


def rows(pg_uri: str, schema: str, task: str) -> dict[int, tuple[int, str | None]]:
    """Row id -> (status, claim token) of the task's status rows."""
    found = query(pg_uri, f'SELECT id, status, claim_token FROM "{schema}".status_table WHERE task_name = %s', task)
    return {int(i): (int(status), token) for i, status, token in found}


def process_gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its new parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")
