"""The crawler database as ``import-progress`` (:mod:`crawler_ops.migration.import_progress`) uses it: read a task's
progress and open runs under its planning lock, replace its progress with the old service's, record the import."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from crawler_ops.hooks.store.db import CrawlerDbHook, Cursor, create_schema, fetch_dict, schema_exists
from crawler_ops.hooks.store.sqlfiles import read_sql

RUN_MODE = "import"


class ProgressImportHook(CrawlerDbHook):
    """One crawl task's progress as an import reads and replaces it (schema ``crawler_ops``).

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param task_id: the crawl task whose progress is imported.
    """

    def ensure_schema(self, cur: Cursor) -> None:
        create_schema(cur)

    def schema_exists(self, cur: Cursor) -> bool:
        return schema_exists(cur)

    def progress_locked(self, cur: Cursor) -> dict[str, Any] | None:
        """Watermark, total and counts, with the progress row locked until the transaction ends (None: no row)."""
        return fetch_dict(cur, read_sql("select_progress_locked"), {"task": self.task_id})

    def open_runs(self, cur: Cursor) -> list[str]:
        """Runs that planned from the watermark and have not committed (or were abandoned without closing)."""
        return [str(row[0]) for row in cur.execute(read_sql("select_open_runs"), {"task": self.task_id})]

    def import_progress(
        self, cur: Cursor, run_id: str, watermark: int, total: int | None, filtered: int, produced: int
    ) -> list[int]:
        """Replace the watermark, total and counts with imported ones and drop the batch rows starting below the
        new watermark; returns the dropped rows' statuses."""
        params = {"task": self.task_id, "run_id": run_id, "watermark": watermark, "total": total}
        cur.execute(read_sql("import_progress"), {**params, "filtered": filtered, "produced": produced})
        rows = cur.execute(read_sql("drop_batches_below"), {"task": self.task_id, "watermark": watermark})
        return [int(row[0]) for row in rows.fetchall()]

    def record_import(
        self, cur: Cursor, run_id: str, stamp: datetime, *, total: int | None, old: int | None, new: int, note: str
    ) -> None:
        """The import as a finished run of mode ``import`` in the run history: watermark ``old`` -> ``new``, with
        ``note`` saying what changed."""
        task = {"task": self.task_id, "run_id": run_id}
        start = {
            **task,
            "mode": RUN_MODE,
            "ref": stamp,
            "total": total,
            "watermark": old,
            "planned": 0,
            "window_count": None,
        }
        cur.execute(read_sql("start_run"), start)
        cur.execute(read_sql("add_run_note"), {**task, "note": note[:2000]})
        cur.execute(read_sql("finish_run"), {**task, "status": "success", "watermark": new, "errors": Jsonb([])})
