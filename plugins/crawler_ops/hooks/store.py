"""The crawl store in PostgreSQL: watermark, batch status rows, run records, errors and dead letters.

Every statement lives in ``include/sql/<name>.sql`` with bound parameters only. Planning and committing
of one task are serialised by a transaction-scoped advisory lock; batches are claimed with leases and
completed under a fence (the claim token), so two runs never crawl the same batch at the same time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, cast

import psycopg
from airflow.providers.postgres.hooks.postgres import PostgresHook
from psycopg.types.json import Jsonb

from crawler_ops.errors import StatusTableError
from crawler_ops.planning import Batch
from crawler_ops.sqlfiles import read_sql
from crawler_ops.status_table import DONE, PENDING, StatusTable

DEAD_LETTER_MAX_BYTES = 64 * 1024
# Crawl batches follow the shared status-table protocol; id = batch start offset, plus hi/run_id/expired.
BATCHES = StatusTable("crawler_ops", "batch_status")


@dataclass(frozen=True)
class StatusRow:
    batch: Batch
    status: int


@dataclass(frozen=True)
class BatchOutcome:
    """What one finished batch adds to its run: counts, dead letters, and the early-stop cutoff it found."""

    batch: Batch
    fetched: int
    kept: int
    published: int
    expired: int
    dead_letters: Sequence[tuple[int, str, Any]] = ()
    cutoff: int = 0
    skipped_as_expired: bool = False


class CrawlerDbHook(PostgresHook):
    """A :class:`PostgresHook` with one connection, transactions, and errors that name the task.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param task_id: the crawl or executor task the work is for (``task_name`` in status tables).
    """

    def __init__(self, postgres_conn_id: str, task_id: str) -> None:
        super().__init__(postgres_conn_id=postgres_conn_id)
        self.task_id = task_id

    @cached_property
    def db(self) -> psycopg.Connection:
        try:
            return cast(psycopg.Connection, self.get_conn())
        except psycopg.OperationalError as exc:
            raise StatusTableError(
                f"task {self.task_id}: cannot connect to PostgreSQL (connection '{self.postgres_conn_id}'): {exc}"
            ) from exc

    def close(self) -> None:
        """Close the connection if one was opened."""
        db = self.__dict__.pop("db", None)
        if db is not None:
            db.close()

    @contextmanager
    def transaction(self, lock: bool = False) -> Iterator[psycopg.Cursor]:
        """A transaction; with ``lock``, serialised against other transactions that lock this task."""
        try:
            with self.db.transaction(), self.db.cursor() as cur:
                if lock:
                    cur.execute(read_sql("lock_task"), {"task": self.task_id})
                yield cur
        except psycopg.OperationalError as exc:
            raise StatusTableError(f"task {self.task_id}: PostgreSQL failed: {exc}") from exc


class CrawlStoreHook(CrawlerDbHook):
    """Progress and status-table access for one crawl task (schema ``crawler_ops``)."""

    def ensure_schema(self) -> None:
        with self.transaction() as cur:
            cur.execute(read_sql("lock_schema"))
            cur.execute(read_sql("schema"))

    # ----------------------------------------------------------------- planning

    def read_watermark(self, cur: psycopg.Cursor) -> int | None:
        row = cur.execute(read_sql("select_progress"), {"task": self.task_id}).fetchone()
        return None if row is None else int(row[0])

    def read_rows(self, cur: psycopg.Cursor, above: int) -> list[StatusRow]:
        rows = cur.execute(read_sql("select_batches"), {"task": self.task_id, "from": above}).fetchall()
        return [StatusRow(Batch(int(lo), int(hi)), int(status)) for lo, hi, status in rows]

    def reset(self, cur: psycopg.Cursor) -> None:
        cur.execute(read_sql("reset_batches"), {"task": self.task_id})
        cur.execute(read_sql("reset_progress"), {"task": self.task_id})

    def insert_batches(
        self, cur: psycopg.Cursor, batches: Iterable[Batch], run_id: str, *, expired: bool = False
    ) -> None:
        params = [
            {
                "lo": b.lo,
                "hi": b.hi,
                "status": DONE if expired else PENDING,
                "task": self.task_id,
                "run_id": run_id,
                "expired": expired,
            }
            for b in batches
        ]
        if params:
            cur.executemany(read_sql("insert_batches"), params)

    def start_run(
        self,
        cur: psycopg.Cursor,
        run_id: str,
        mode: str,
        ref: datetime,
        total: int | None,
        watermark: int | None,
        planned: int,
    ) -> None:
        cur.execute(
            read_sql("start_run"),
            {
                "task": self.task_id,
                "run_id": run_id,
                "mode": mode,
                "ref": ref,
                "total": total,
                "watermark": watermark,
                "planned": planned,
            },
        )

    # ----------------------------------------------------------------- batches

    def claim(self, batch: Batch, owner: str, token: str, lease_s: int) -> bool:
        """Claim ``batch`` for worker ``owner`` (run + map index); False when it is done or held by another."""
        with self.transaction() as cur:
            return bool(BATCHES.claim_ids(cur, self.task_id, [batch.lo], token, owner, lease_s))

    def renew(self, batch: Batch, token: str) -> bool:
        """Whether this worker still holds ``batch`` (its lease renewed); checked before publishing it."""
        with self.transaction() as cur:
            return BATCHES.renew(cur, self.task_id, batch.lo, token)

    def complete(
        self, outcome: BatchOutcome, run_id: str, token: str | None, renew: Batch | None = None
    ) -> tuple[bool, int, bool | None]:
        """Record a finished batch (done, counts, dead letters) atomically; also renew the claim of ``renew``
        (the batch to be produced next) so that check costs no extra round trip.

        :return: whether this worker still held the claim, the run's current expiry cutoff, and whether it
            still holds ``renew`` (None when not asked).
        """
        with self.transaction() as cur:
            held = BATCHES.renew(cur, self.task_id, renew.lo, token) if renew is not None and token else None
            fenced_in = True
            if token is not None:
                fenced_in = bool(BATCHES.complete(cur, self.task_id, [outcome.batch.lo], token))
                if fenced_in and outcome.skipped_as_expired:
                    cur.execute(read_sql("mark_expired"), {"task": self.task_id, "lo": outcome.batch.lo})
            if outcome.dead_letters:
                cur.executemany(
                    read_sql("insert_error"),
                    [
                        self.error_row(run_id, "record", reason, offset, None, Jsonb(cap_record(record)))
                        for offset, reason, record in outcome.dead_letters
                    ],
                )
            row = cur.execute(
                read_sql("add_run_counts"),
                {
                    "task": self.task_id,
                    "run_id": run_id,
                    "fetched": outcome.fetched,
                    "kept": outcome.kept,
                    "published": outcome.published,
                    "expired": outcome.expired,
                    "dead": len(outcome.dead_letters),
                    "pages": 0 if outcome.skipped_as_expired else 1,
                    "cutoff": outcome.cutoff,
                },
            ).fetchone()
        return fenced_in, int(row[0]) if row else 0, held

    def release(self, batch: Batch, token: str, error: str) -> None:
        """A failed batch goes back to pending with its error; crawl batches are never parked (SPEC §3)."""
        with self.transaction() as cur:
            BATCHES.release(cur, self.task_id, batch.lo, token, error, max_attempts=None)

    def release_run(self, cur: psycopg.Cursor, run_id: str) -> int:
        """Claims the run made and did not finish go back to pending (after all its chunks ended)."""
        return BATCHES.release_owner(cur, self.task_id, run_id)

    def add_run_error(self, run_id: str, error: str, batch: Batch | None = None) -> None:
        """Note a chunk's failure on the run's summary and in the error table (kind 'batch'; offsets of the
        batches in flight, or NULL when it failed outside a batch, e.g. while claiming)."""
        with self.transaction() as cur:
            self.record_error(cur, run_id, error, "batch", batch)

    def record_error(self, cur: psycopg.Cursor, run_id: str, error: str, kind: str, batch: Batch | None) -> None:
        cur.execute(read_sql("add_run_error"), {"task": self.task_id, "run_id": run_id, "error": error[:2000]})
        lo, hi = (batch.lo, batch.hi) if batch else (None, None)
        cur.execute(read_sql("insert_error"), self.error_row(run_id, kind, error[:8000], lo, hi, None))

    def error_row(
        self, run_id: str, kind: str, reason: str, offset: int | None, offset_end: int | None, record: Any
    ) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "run_id": run_id,
            "kind": kind,
            "offset": offset,
            "offset_end": offset_end,
            "reason": reason,
            "record": record,
        }

    # ----------------------------------------------------------------- commit

    def read_run(self, cur: psycopg.Cursor, run_id: str) -> dict[str, Any] | None:
        cur.execute(read_sql("select_run"), {"task": self.task_id, "run_id": run_id})
        row = cur.fetchone()
        if row is None:
            return None
        names = [d.name for d in cur.description or ()]
        return dict(zip(names, row, strict=True))

    def done_batches(self, cur: psycopg.Cursor, above: int) -> list[Batch]:
        rows = cur.execute(read_sql("select_done"), {"task": self.task_id, "from": above}).fetchall()
        return [Batch(int(lo), int(hi)) for lo, hi in rows]

    def run_statement(self, cur: psycopg.Cursor, name: str, **params: Any) -> None:
        cur.execute(read_sql(name), {"task": self.task_id, **params})


def cap_record(record: Any) -> Any:
    """Dead-lettered records are stored whole up to a size cap, then as a truncated JSON text."""
    text = json.dumps(record, ensure_ascii=False, default=str)
    if len(text.encode()) <= DEAD_LETTER_MAX_BYTES:
        return record
    return {"truncated": True, "text": text[: DEAD_LETTER_MAX_BYTES // 4]}
