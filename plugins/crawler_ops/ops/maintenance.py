"""Retention, run by the DAG ``crawler_ops_maintenance``.

Deletes, in bounded batches (one statement and transaction per ``delete_batch`` rows, so a large backlog
never holds long locks or one huge transaction):

- run history rows finished more than ``keep_runs_days`` ago;
- error and dead-letter rows older than ``keep_errors_days``;
- done status rows that finished more than ``keep_status_days`` ago: crawl batch rows below their
  task's watermark, and executor rows whose source row no longer exists (a done executor row whose
  source row exists is kept, or the next sync would queue that row again).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from psycopg import sql

from crawler_ops.config import ExecutorTaskConfig, MaintenanceConfig
from crawler_ops.errors import StatusTableError
from crawler_ops.executor import executor_hook, find_table
from crawler_ops.hooks.store.db import CrawlerDbHook, Cursor, table_columns
from crawler_ops.hooks.store.retention import PrunedTable, RetentionHook
from crawler_ops.hooks.store.status_table import StatusTable

log = logging.getLogger(__name__)
DAY_S = 86_400


def delete_in_batches(hook: CrawlerDbHook, delete: Callable[[Cursor], int], limit: int, label: str) -> int:
    """Run a bounded DELETE (at most ``limit`` rows), one transaction each, until it deletes fewer than the limit."""
    deleted = 0
    while True:
        with hook.transaction() as cur:
            count = delete(cur)
        deleted += count
        if count:
            log.info("retention: %s: deleted %d rows (%d so far)", label, count, deleted)
        if count < limit:
            return deleted


def crawl_databases(cfg: MaintenanceConfig, conn_ids: Iterable[str]) -> list[str]:
    """Every PostgreSQL connection holding a crawler_ops schema: the crawl tasks' and the maintenance DAG's."""
    return sorted({cfg.postgres_conn_id, *conn_ids})


def prune_crawl_table(cfg: MaintenanceConfig, conn_id: str, name: PrunedTable, keep_days: float) -> int:
    """Prune one crawler_ops table (run history, errors or done batch rows) in the database of ``conn_id``."""
    hook = RetentionHook(conn_id, "maintenance")
    try:
        with hook.transaction() as cur:
            hook.ensure_schema(cur)
        limit = cfg.delete_batch
        return delete_in_batches(
            hook, lambda cur: hook.prune(cur, name, keep_days * DAY_S, limit), limit, f"{conn_id} {name}"
        )
    finally:
        hook.close()


def prune_executor_rows(cfg: MaintenanceConfig, executor: ExecutorTaskConfig) -> int:
    """Prune one executor's done rows whose source row is gone (nothing when its status table does not exist yet).

    Read-only on the catalog: creating or upgrading the status table is the executor's sync's job, and doing it
    here too would race with a sync running at the same time.
    """
    hook = executor_hook(executor)
    try:
        with hook.transaction() as cur:
            source_schema, source_table = find_table(cur, executor, "source_table", must_exist=True)
            id_column = table_columns(cur, source_schema, source_table).get("id")
            status_schema, status_name = find_table(cur, executor, "status_table", must_exist=False)
            status = StatusTable.inspect(cur, status_schema, status_name)
        if status is None or id_column is None:
            log.info("retention: executor %s has no status table or no id column yet; nothing to prune", executor.name)
            return 0
        statement = status.statement(
            "prune_done", source=sql.Identifier(source_schema, source_table), source_id=sql.Identifier(id_column)
        )
        params = {"task": executor.name, "age_s": int(cfg.keep_status_days * DAY_S), "limit": cfg.delete_batch}
        return delete_in_batches(
            hook,
            lambda cur: cur.execute(statement, params).rowcount,
            cfg.delete_batch,
            f"executor {executor.name} {status.label}",
        )
    finally:
        hook.close()


def prune_all(
    cfg: MaintenanceConfig, crawl_conn_ids: Iterable[str], name: PrunedTable, keep_days: float
) -> dict[str, int]:
    """Prune one crawler_ops table in every crawl database; returns rows deleted per connection.

    A database that fails does not stop the others; the failures are raised together at the end.
    """
    steps = {
        conn: functools.partial(prune_crawl_table, cfg, conn, name, keep_days)
        for conn in crawl_databases(cfg, crawl_conn_ids)
    }
    return run_each(steps, name)


def prune_status_rows(
    cfg: MaintenanceConfig, crawl_conn_ids: Iterable[str], executors: Iterable[ExecutorTaskConfig]
) -> dict[str, Any]:
    """Done crawl batch rows and executor rows; one executor failing does not stop the others."""
    result: dict[str, Any] = {"crawl_batches": prune_all(cfg, crawl_conn_ids, "batches", cfg.keep_status_days)}
    steps = {f"executor {e.name}": functools.partial(prune_executor_rows, cfg, e) for e in executors}
    return {**result, **run_each(steps, "executor status rows")}


def run_each(steps: Mapping[str, Callable[[], int]], what: str) -> dict[str, int]:
    """Run every step even when some fail (one database or executor must not stop the others); then raise one
    error naming each failure."""
    done: dict[str, int] = {}
    failures = []
    for label, step in steps.items():
        try:
            done[label] = step()
        except Exception as exc:  # reported below, after the other steps ran
            log.exception("retention: %s: %s failed", what, label)
            failures.append(f"{label}: {type(exc).__name__}: {exc}")
    if failures:
        raise StatusTableError(
            f"retention of {what} failed for {len(failures)} of {len(steps)}: " + "; ".join(failures)
        )
    return done
