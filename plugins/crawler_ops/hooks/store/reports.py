"""Read-only report queries on the crawler database: the status view and run history of one crawl task
(:mod:`crawler_ops.ops.status`) and the gauge rows of many (:mod:`crawler_ops.ops.gauges`). Before any run created
the ``crawler_ops`` schema each answers "nothing yet" instead of failing, and none creates it."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from crawler_ops.hooks.store.batches import BatchRows
from crawler_ops.hooks.store.db import CrawlerDbHook, Cursor, fetch_dict, fetch_rows, schema_exists
from crawler_ops.hooks.store.sqlfiles import read_sql


class CrawlReportHook(CrawlerDbHook):
    """What the status view, the run history and the gauges show of crawl tasks.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param task_id: the crawl task of :meth:`status_view` and :meth:`run_history` (a label for :meth:`gauge_rows`).
    """

    @cached_property
    def batches(self) -> BatchRows:
        return BatchRows(self.task_id)

    def status_view(self, cur: Cursor) -> dict[str, Any] | None:
        """Progress, batch rows by status, the last run, the newest run's field drift and the last day's errors (None
        before any run)."""
        if not schema_exists(cur):
            return None
        task = {"task": self.task_id}
        return {
            "progress": fetch_dict(cur, read_sql("view/progress"), task),
            "batches": dict(cur.execute(read_sql("view/batch_counts"), task).fetchall()),
            "last_run": fetch_dict(cur, read_sql("view/last_run"), task),
            "drift": fetch_dict(cur, read_sql("view/last_drift"), task),
            "errors": fetch_dict(cur, read_sql("view/recent_errors"), task),
            "parked": self.batches.parked(cur),
        }

    def run_history(self, cur: Cursor, limit: int) -> dict[str, Any] | None:
        """The run still marked running with its batches done, and the last ``limit`` finished runs, newest
        first (None before any run)."""
        if not schema_exists(cur):
            return None
        task = {"task": self.task_id}
        return {
            "current_run": fetch_dict(cur, read_sql("view/current_run"), task),
            "runs": fetch_rows(cur, read_sql("view/run_history"), {**task, "limit": limit}),
        }

    def gauge_rows(self, cur: Cursor, task_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Per task of ``task_ids`` (all in this database): stored total and watermark, parked batches, seconds
        since the last success, and the last finished run's duration and records fetched. One statement per table
        for all the tasks; a task that never ran is absent."""
        if not schema_exists(cur):
            return {}
        params = {"tasks": list(task_ids)}
        rows: dict[str, dict[str, Any]] = {}
        for task, total, watermark in cur.execute(read_sql("gauges/progress"), params).fetchall():
            rows.setdefault(task, {}).update(total=total, watermark=watermark)
        for task, parked in cur.execute(read_sql("gauges/parked"), params).fetchall():
            rows.setdefault(task, {})["parked_batches"] = int(parked)
        runs = fetch_rows(cur, read_sql("gauges/runs"), params)
        for run in runs:
            rows.setdefault(run.pop("task_id"), {}).update(run)
        return rows
