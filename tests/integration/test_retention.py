"""The retention DAG on a real PostgreSQL: it deletes only what is old, in bounded batches, in every crawl database,
and keeps progress.

The crawl tables live in two databases created for the test (the retention DAG deletes by age across all tasks of a
database, so it must never run against the one other tests share); the executor tables live in the test's schema.
Statement-level triggers log how many rows each DELETE removed, so a DELETE that ignored its limit fails the test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import yaml

from crawler_ops.config import load_config
from crawler_ops.factory.maintenance import build_maintenance_dags
from crawler_ops.hooks.store.retention import RetentionHook
from tests.support import query

pytestmark = pytest.mark.integration

OLD, NEW = "now() - interval '40 days'", "now() - interval '1 day'"
OLD_EPOCH, NEW_EPOCH = "extract(epoch from now())::int - 40 * 86400", "extract(epoch from now())::int - 86400"
DELETE_BATCH = 2
LOG_DELETES = """
CREATE TABLE IF NOT EXISTS {schema}.delete_log (tbl text NOT NULL, n int NOT NULL);
CREATE OR REPLACE FUNCTION {schema}.log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.delete_log SELECT TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, count(*) FROM gone;
    RETURN NULL;
END $$;
"""
TRIGGER = (
    "CREATE TRIGGER log_delete AFTER DELETE ON {table} REFERENCING OLD TABLE AS gone "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.log_delete()"
)


def log_deletes(uri: str, schema: str, tables: list[str]) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(LOG_DELETES.format(schema=schema))
        for table in tables:
            conn.execute(TRIGGER.format(table=table, schema=schema))


def deletes(uri: str, schema: str) -> dict[str, list[int]]:
    """Rows removed per DELETE statement, by table (statements that removed nothing included)."""
    logged: dict[str, list[int]] = {}
    for table, n in query(uri, f"SELECT tbl, n FROM {schema}.delete_log"):
        logged.setdefault(table, []).append(n)
    return logged


@pytest.fixture
def crawl_databases(pg_uri: str, unique_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Create a database for the test, as the connection ``<name>``; returns its URI. Dropped afterwards."""
    created: list[str] = []

    def create(name: str) -> str:
        database = f"{unique_id}_{name}"
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        created.append(database)
        uri = pg_uri.rsplit("/", 1)[0] + f"/{database}"
        monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", uri)
        return uri

    yield create
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for database in created:
            conn.execute(f'DROP DATABASE "{database}" WITH (FORCE)')


def seed_crawl_rows(uri: str, conn_id: str, task: str) -> None:
    """Run history, error rows and batch rows of ``task``, some older than 30 days; deletions logged."""
    store = RetentionHook(conn_id, task)
    with store.transaction() as cur:
        store.ensure_schema(cur)
    store.close()
    log_deletes(uri, "public", ["crawler_ops.crawl_run", "crawler_ops.crawl_error", "crawler_ops.batch_status"])
    with psycopg.connect(uri, autocommit=True) as conn:
        runs = [("old-done", OLD, OLD), ("old-abandoned", OLD, None), ("new-done", NEW, NEW), ("running", NEW, None)]
        runs += [(f"old-{i}", OLD, OLD) for i in range(3)]
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
        # Old done rows below the watermark go; a recent one and one above the watermark (progress) stay.
        batches = [(lo, lo + 100, OLD) for lo in range(0, 500, 100)] + [(500, 600, NEW), (1000, 1100, OLD)]
        for lo, hi, ended in batches:
            conn.execute(
                "INSERT INTO crawler_ops.batch_status (id, hi, status, start_time, end_time, task_name) "
                f"VALUES (%s, %s, 2, {ended}, {ended}, %s)",
                (lo, hi, task),
            )


def seed_executor_rows(pg_uri: str, schema: str, name: str, epoch: bool) -> dict[str, Any]:
    """A source table with ids 1-3 and a status table mixing done/pending, old/new, present/gone source rows;
    with ``epoch``, the old layout's INT epoch start_time/end_time."""
    old, new = (OLD_EPOCH, NEW_EPOCH) if epoch else (OLD, NEW)
    time_type = "int" if epoch else "timestamptz"
    source, status = f"src_{name}", f"status_{name}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{schema}".{source} (id int PRIMARY KEY, city text)')
        conn.execute(f"INSERT INTO \"{schema}\".{source} SELECT i, 'c' || i FROM generate_series(1, 3) AS i")
        conn.execute(
            f'CREATE TABLE "{schema}".{status} (id int NOT NULL, status int NOT NULL, start_time {time_type}, '
            f"end_time {time_type}, task_name varchar(50) NOT NULL, UNIQUE (id, task_name))"
        )
        rows = [
            (1, 2, old, name),  # done long ago, source row still there: kept (or the next sync re-queues it)
            *[(i, 2, old, name) for i in range(100, 105)],  # done long ago, source row gone: deleted
            (105, 2, new, name),  # done recently, source row gone: kept
            (106, 0, old, name),  # pending: kept
            (107, 2, old, "another_task"),  # another task's row: not this executor's to prune
        ]
        for row_id, state, ended, task in rows:
            conn.execute(
                f'INSERT INTO "{schema}".{status} (id, status, start_time, end_time, task_name) '
                f"VALUES (%s, %s, {ended}, {ended}, %s)",
                (row_id, state, task),
            )
    log_deletes(pg_uri, f'"{schema}"', [f'"{schema}".{status}'])
    return {
        "name": name,
        "source_table": f"{schema}.{source}",
        "status_table": f"{schema}.{status}",
        "output_fields": ["id", "city"],
        "function": "crawler_ops.samples.full_address",
        "schedule": None,
    }


def test_the_retention_dag_deletes_only_what_is_old_in_every_database_in_bounded_batches(
    pg_uri, pg_schema, unique_id, tmp_path, monkeypatch, crawl_databases
):
    databases = {name: crawl_databases(name) for name in ("retain_a", "retain_b")}
    for name, uri in databases.items():
        seed_crawl_rows(uri, name, f"{name}_task")
    executors = [
        seed_executor_rows(pg_uri, pg_schema, f"x{unique_id}", epoch=False),
        seed_executor_rows(pg_uri, pg_schema, f"e{unique_id}", epoch=True),
    ]
    not_synced_yet = {**executors[0], "name": f"y{unique_id}", "status_table": f"{pg_schema}.never_synced"}
    document = {
        "tasks": [
            {"id": f"{name}_task", "kafka": {"topic": name}, "postgres_conn_id": name, "schedule": None}
            for name in databases
        ],
        "executors": [*executors, not_synced_yet],
        "maintenance": {
            "postgres_conn_id": "retain_a",
            "keep_runs_days": 30,
            "keep_errors_days": 30,
            "keep_status_days": 30,
            "delete_batch": DELETE_BATCH,
        },
    }
    config = tmp_path / "tasks.yaml"
    config.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))

    dag = build_maintenance_dags(load_config(config))["crawler_ops_maintenance"]
    assert "Databases: retain_a, retain_b." in dag.doc_md, "the database other tests share is not pruned"
    assert str(dag.test().state) == "success"

    for name, uri in databases.items():
        task = f"{name}_task"

        def ids(statement: str, uri: str = uri, task: str = task) -> list[Any]:
            return sorted(row[0] for row in query(uri, statement, task))

        assert ids("SELECT run_id FROM crawler_ops.crawl_run WHERE task_id = %s") == ["new-done", "running"], name
        assert ids("SELECT source_offset FROM crawler_ops.crawl_error WHERE task_id = %s") == [5, 6], name
        assert ids("SELECT id FROM crawler_ops.batch_status WHERE task_name = %s") == [500, 1000], name
        assert query(uri, "SELECT watermark FROM crawler_ops.progress WHERE task_id = %s", task) == [(1000,)]
        assert_bounded(
            deletes(uri, "public"),
            {"crawler_ops.crawl_run": 5, "crawler_ops.crawl_error": 5, "crawler_ops.batch_status": 5},
        )
    for executor in executors:
        status = executor["status_table"].split(".")[1]
        assert query(pg_uri, f'SELECT id, task_name FROM "{pg_schema}".{status} ORDER BY id') == [
            (1, executor["name"]),
            (105, executor["name"]),
            (106, executor["name"]),
            (107, "another_task"),
        ], executor["name"]
    assert_bounded(
        deletes(pg_uri, f'"{pg_schema}"'),
        {f"{pg_schema}.{executor['status_table'].split('.')[1]}": 5 for executor in executors},
    )
    assert query(pg_uri, "SELECT to_regclass(%s)::text", f"{pg_schema}.never_synced") == [(None,)], (
        "retention never creates a status table (that is the executor's sync, and they would race)"
    )


def assert_bounded(logged: dict[str, list[int]], removed: dict[str, int]) -> None:
    """Each table lost ``removed`` rows in DELETEs of at most DELETE_BATCH rows each."""
    for table, total in removed.items():
        sizes = logged.get(table, [])
        assert sum(sizes) == total, (table, sizes)
        assert max(sizes) <= DELETE_BATCH, f"{table}: a DELETE removed {max(sizes)} rows, the limit is {DELETE_BATCH}"
        assert len([n for n in sizes if n]) >= math.ceil(total / DELETE_BATCH), (table, sizes)
