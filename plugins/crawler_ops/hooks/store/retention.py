"""Retention of the ``crawler_ops`` tables, for the maintenance DAG (:mod:`crawler_ops.ops.maintenance`)."""

from __future__ import annotations

from typing import Literal

from crawler_ops.hooks.store.db import CrawlerDbHook, Cursor, create_schema
from crawler_ops.hooks.store.sqlfiles import read_sql

PrunedTable = Literal["runs", "errors", "batches"]


class RetentionHook(CrawlerDbHook):
    """Deletes old rows of one crawler database's run history, errors and done batch rows, every task's.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param task_id: a label for error messages (the rows of every task are pruned).
    """

    def ensure_schema(self, cur: Cursor) -> None:
        create_schema(cur)

    def prune(self, cur: Cursor, table: PrunedTable, age_s: float, limit: int) -> int:
        """Delete up to ``limit`` rows of ``table`` older than ``age_s`` seconds; returns how many went."""
        return cur.execute(read_sql(f"prune/{table}"), {"age_s": age_s, "limit": limit}).rowcount
