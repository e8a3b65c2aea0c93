"""The retention DAG on a real PostgreSQL: it deletes only what is old, in bounded batches, and keeps progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from crawler_ops.config import load_config
from crawler_ops.factory import build_maintenance_dags
from crawler_ops.hooks.store import CrawlStoreHook
from tests.support import query

pytestmark = pytest.mark.integration

OLD, NEW = "now() - interval '40 days'", "now() - interval '1 day'"


def seed_crawl_rows(pg_uri: str, task: str) -> None:
    """Run history, error rows and batch rows of ``task``, some older than 30 days."""
    store = CrawlStoreHook("crawler_db", task)
    with store.transaction() as cur:
        store.ensure_schema(cur)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        runs = [("old-done", OLD, OLD), ("old-abandoned", OLD, None), ("new-done", NEW, NEW), ("running", NEW, None)]
        for run_id, started, finished in runs:
            conn.execute(
                "INSERT INTO crawler_ops.crawl_run (task_id, run_id, mode, ref_time, status, started_at, finished_at) "
                f"VALUES (%s, %s, 'incremental', now(), 'success', {started}, {finished or 'NULL'})",
                (task, run_id),
            )
        for i in range(7):
            conn.execute(
                "INSERT INTO crawler_ops.crawl_error (task_id, run_id, kind, source_offset, reason, created_at) "
                f"VALUES (%s, 'r', 'record', %s, 'bad date', {OLD if i < 5 else NEW})",
                (task, i),
            )
        conn.execute(
            "INSERT INTO crawler_ops.progress (task_id, watermark, status) VALUES (%s, 1000, 'completed')", (task,)
        )
        batches = [(0, 100, OLD), (100, 200, NEW), (1000, 1100, OLD)]  # the last one is above the watermark
        for lo, hi, ended in batches:
            conn.execute(
                "INSERT INTO crawler_ops.batch_status (id, hi, status, start_time, end_time, task_name) "
                f"VALUES (%s, %s, 2, {ended}, {ended}, %s)",
                (lo, hi, task),
            )


def seed_executor_rows(pg_uri: str, schema: str, name: str) -> dict[str, Any]:
    """A source table with ids 1-3 and a status table mixing done/pending, old/new, present/gone source rows."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{schema}".src (id int PRIMARY KEY, city text)')
        conn.execute(f"INSERT INTO \"{schema}\".src SELECT i, 'c' || i FROM generate_series(1, 3) AS i")
        conn.execute(
            f'CREATE TABLE "{schema}".status (id int NOT NULL, status int NOT NULL, start_time timestamptz, '
            "end_time timestamptz, task_name varchar(50) NOT NULL, UNIQUE (id, task_name))"
        )
        rows = [
            (1, 2, OLD, name),  # done long ago, source row still there: kept (or the next sync re-queues it)
            (100, 2, OLD, name),  # done long ago, source row gone: deleted
            (101, 2, OLD, name),  # same
            (102, 2, NEW, name),  # done recently, source row gone: kept
            (103, 0, OLD, name),  # pending: kept
            (104, 2, OLD, "another_task"),  # another task's row: not this executor's to prune
        ]
        for row_id, status, ended, task in rows:
            conn.execute(
                f'INSERT INTO "{schema}".status (id, status, start_time, end_time, task_name) '
                f"VALUES (%s, %s, {ended}, {ended}, %s)",
                (row_id, status, task),
            )
    return {
        "name": name,
        "source_table": f"{schema}.src",
        "status_table": f"{schema}.status",
        "output_fields": ["id", "city"],
        "function": "crawler_ops.samples.full_address",
        "schedule": None,
    }


def test_the_retention_dag_deletes_only_what_is_old(pg_uri, pg_schema, unique_id, tmp_path, monkeypatch):
    seed_crawl_rows(pg_uri, unique_id)
    executor = seed_executor_rows(pg_uri, pg_schema, f"x{unique_id}")
    config = tmp_path / "tasks.yaml"
    not_synced_yet = {**executor, "name": f"y{unique_id}", "status_table": f"{pg_schema}.never_synced"}
    document = {
        "executors": [executor, not_synced_yet],
        "maintenance": {"keep_runs_days": 30, "keep_errors_days": 30, "keep_status_days": 30, "delete_batch": 2},
    }
    config.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))

    dag = build_maintenance_dags(load_config(Path(config)))["crawler_ops_maintenance"]
    assert str(dag.test().state) == "success"

    def ids(statement: str, *params: Any) -> list[Any]:
        return sorted(row[0] for row in query(pg_uri, statement, *params))

    assert ids("SELECT run_id FROM crawler_ops.crawl_run WHERE task_id = %s", unique_id) == ["new-done", "running"]
    assert ids("SELECT source_offset FROM crawler_ops.crawl_error WHERE task_id = %s", unique_id) == [5, 6]
    assert ids("SELECT id FROM crawler_ops.batch_status WHERE task_name = %s", unique_id) == [100, 1000]
    assert query(pg_uri, f'SELECT id, task_name FROM "{pg_schema}".status ORDER BY id') == [
        (1, executor["name"]),
        (102, executor["name"]),
        (103, executor["name"]),
        (104, "another_task"),
    ]
    assert query(pg_uri, "SELECT watermark FROM crawler_ops.progress WHERE task_id = %s", unique_id) == [(1000,)]
    assert query(pg_uri, "SELECT to_regclass(%s)::text", f"{pg_schema}.never_synced") == [(None,)], (
        "retention never creates a status table (that is the executor's sync, and they would race)"
    )
