"""A sequential feed's page rows in ``crawler_ops.batch_status`` (one row per page: id = the page's number in the
task's life, the position that fetches it) and the task's mark in ``crawler_ops.progress``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from crawler_ops.hooks.store.db import Cursor
from crawler_ops.hooks.store.sqlfiles import read_sql


@dataclass(frozen=True)
class Mark:
    """The newest record a crawl saw: its key, and its date (None: it had none)."""

    key: str
    date: datetime | None


@dataclass(frozen=True)
class PageRow:
    """A page of a feed's open plan: its number, status, the position that fetches it (None: the feed's first
    page) and, on the plan's first page once done, the mark the plan's commit saves."""

    lo: int
    status: int
    position: str | None
    mark: Mark | None


@dataclass(frozen=True)
class FeedRows:
    """One crawl task's feed pages and mark.

    :param task_id: the crawl task.
    """

    task_id: str

    def pages(self, cur: Cursor, start: int) -> list[PageRow]:
        """The page rows from ``start`` (the watermark) on, in page order."""
        rows = cur.execute(read_sql("feed/select_pages"), {"task": self.task_id, "from": start}).fetchall()
        return [
            PageRow(int(lo), int(status), position, None if key is None else Mark(str(key), date))
            for lo, status, position, key, date in rows
        ]

    def insert(self, cur: Cursor, lo: int, run_id: str, position: str | None) -> None:
        """Page ``lo``, pending, fetched from ``position``; an existing row stays."""
        cur.execute(
            read_sql("feed/insert_page"), {"task": self.task_id, "lo": lo, "run_id": run_id, "cursor": position}
        )

    def set_plan_mark(self, cur: Cursor, lo: int, mark: Mark) -> None:
        """The newest record of the plan whose first page is ``lo``."""
        params = {"task": self.task_id, "lo": lo, "mark": mark.key, "mark_date": mark.date}
        cur.execute(read_sql("feed/set_mark"), params)

    def mark(self, cur: Cursor) -> Mark | None:
        """Where the next crawl stops: the newest record the last completed plan saw (None: no plan completed)."""
        row = cur.execute(read_sql("feed/select_mark"), {"task": self.task_id}).fetchone()
        return None if row is None or row[0] is None else Mark(str(row[0]), row[1])

    def save_mark(self, cur: Cursor, mark: Mark | None) -> None:
        """A completed plan's mark (None: its first page was empty, the mark before it stays)."""
        params = {"task": self.task_id, "mark": None if mark is None else mark.key}
        cur.execute(read_sql("feed/save_mark"), {**params, "mark_date": None if mark is None else mark.date})
