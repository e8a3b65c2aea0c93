"""The rows of a watched crawl task (``crawler_ops.source_watch``): what its trigger last announced, beside the total
the task's last commit saw."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from crawler_ops.errors import StatusTableError
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
    """The rows of the watched tasks, read and written by their triggers in the triggerer: one connection for all the
    triggers of a process (a lock around each statement; a statement is a millisecond, a poll every few seconds at
    most), opened again once after a connection lost.

    :param postgres_conn_id: Airflow connection of the crawler database.
    """

    def __init__(self, postgres_conn_id: str) -> None:
        super().__init__(postgres_conn_id, "watch")
        self.serial = threading.Lock()

    def read(self, task_id: str) -> WatchState:
        row = self.statement(task_id, "watch/select", {"task": task_id})
        assert row is not None
        committed, announced, age = row
        return WatchState(
            None if committed is None else int(committed),
            None if announced is None else int(announced),
            None if age is None else float(age),
        )

    def announced(self, task_id: str, total: int) -> None:
        self.statement(task_id, "watch/save", {"task": task_id, "total": total})

    def statement(self, task_id: str, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """One statement, committed on its own (one round trip); the schema is made when missing (a watch may ask
        before any run made it), and a lost connection replaced once."""
        with self.serial:
            try:
                return self.execute(name, params)
            except StatusTableError:  # the connection was lost: once more on a new one
                self.close()
                return self.execute(name, params)

    def execute(self, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        try:
            with self.single() as cur:
                return first_row(cur.execute(read_sql(name), params))
        except psycopg.errors.UndefinedTable:
            with self.transaction() as cur:
                create_schema(cur)
                return first_row(cur.execute(read_sql(name), params))


def first_row(cur: psycopg.Cursor[Any]) -> tuple[Any, ...] | None:
    """The statement's first row; None for one that returns none (an insert)."""
    return cur.fetchone() if cur.description is not None else None
