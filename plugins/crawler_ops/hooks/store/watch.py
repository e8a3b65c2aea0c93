"""The rows of a watched crawl task (``crawler_ops.source_watch``): what its trigger last announced, beside the total
the task's last commit saw."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from crawler_ops.hooks.store.db import CrawlerDbHook, create_schema
from crawler_ops.hooks.store.sqlfiles import read_sql


@dataclass(frozen=True)
class WatchState:
    """What a watched task's trigger compares the source's total with.

    :param committed: the total the task's last commit saw (None before its first).
    :param announced: the total the trigger last announced (None before its first announcement).
    :param age_s: seconds since that announcement (PostgreSQL's clock).
    """

    committed: int | None
    announced: int | None
    age_s: float | None


class WatchStoreHook(CrawlerDbHook):
    """A watched task's rows, read and written by its trigger in the triggerer.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param task_id: the crawl task.
    """

    def read(self) -> WatchState:
        try:
            with self.transaction() as cur:
                row = cur.execute(read_sql("watch/select"), {"task": self.task_id}).fetchone()
        except psycopg.errors.UndefinedTable:
            with self.transaction() as cur:  # a watch may ask before any run made the schema: once, then again
                create_schema(cur)
                row = cur.execute(read_sql("watch/select"), {"task": self.task_id}).fetchone()
        assert row is not None
        committed, announced, age = row
        return WatchState(
            None if committed is None else int(committed),
            None if announced is None else int(announced),
            None if age is None else float(age),
        )

    def announced(self, total: int) -> None:
        with self.single() as cur:
            cur.execute(read_sql("watch/save"), {"task": self.task_id, "total": total})
