"""The crawler database in PostgreSQL: watermark, batch status rows, run records, errors and dead letters.

Every statement lives in ``include/sql/<name>.sql`` with bound parameters only, and only this module and
:mod:`crawler_ops.status_table` name those files. One calling convention: each method that reads or writes
takes the cursor of a transaction the caller opened (``with store.transaction() as cur``), so the caller
decides what commits together. Planning and committing of one task are serialised by a transaction-scoped
advisory lock (``transaction(lock=True)``); batches are claimed with leases and completed under a fence (the
claim token), so two runs never crawl the same batch at the same time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar, Literal, cast

import psycopg
from airflow.providers.postgres.hooks.postgres import PostgresHook
from psycopg import sql
from psycopg.types.json import Jsonb

from crawler_ops.errors import StatusTableError
from crawler_ops.planning import Batch
from crawler_ops.records import cap_record
from crawler_ops.results import BatchOutcome, DeadLetter
from crawler_ops.sqlfiles import read_sql
from crawler_ops.status_table import DONE, PARKED, PENDING, StatusTable

# An escaped backslash or an escaped NUL in JSON text, matched left to right: a backslash followed by "u0000" is text.
JSON_NUL_ESCAPE = re.compile(r"\\(?:\\|u0000)")
Cursor = psycopg.Cursor[Any]


def fetch_dict(cur: Cursor, statement: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The first row of ``statement`` as a dict by column name (None when there is no row)."""
    row = cur.execute(statement, params).fetchone()
    if row is None:
        return None
    return dict(zip([d.name for d in cur.description or ()], row, strict=True))


def fetch_rows(cur: Cursor, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of ``statement`` as a dict by column name."""
    rows = cur.execute(statement, params).fetchall()
    names = [d.name for d in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in rows]


def find_table(cur: Cursor, schema: str, table: str) -> tuple[str, str] | None:
    """The catalog's spelling of ``schema.table`` (exact match first, then case-insensitive), None if absent."""
    row = cur.execute(read_sql("executor/find_table"), {"schema": schema, "table": table}).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def table_columns(cur: Cursor, schema: str, table: str) -> dict[str, str]:
    """The columns of ``schema.table``: lower-cased name -> the catalog's spelling."""
    rows = cur.execute(read_sql("executor/table_columns"), {"schema": schema, "table": table}).fetchall()
    return {str(r[0]).lower(): str(r[0]) for r in rows}


def select_rows(cur: Cursor, ids: Sequence[int], **parts: sql.Composable) -> list[tuple[Any, ...]]:
    """Rows of a source table by id; ``parts`` fill the identifiers of ``executor/select_rows``
    (``columns``, ``source``, ``source_id``, ``order_by``)."""
    statement = sql.SQL(read_sql("executor/select_rows")).format(**parts)
    return cur.execute(statement, {"ids": list(ids)}).fetchall()


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
    def transaction(self, lock: bool = False) -> Iterator[Cursor]:
        """A transaction; with ``lock``, serialised against other transactions that lock this task."""
        try:
            with self.db.transaction(), self.db.cursor() as cur:
                if lock:
                    cur.execute(read_sql("lock_task"), {"task": self.task_id})
                yield cur
        except psycopg.OperationalError as exc:
            raise StatusTableError(f"task {self.task_id}: PostgreSQL failed: {exc}") from exc


class CrawlStoreHook(CrawlerDbHook):
    """A crawl task's progress (the watermark), run records and errors (schema ``crawler_ops``);
    its batch status rows are :attr:`batches`."""

    @cached_property
    def batches(self) -> BatchRows:
        return BatchRows(self.task_id)

    def ensure_schema(self, cur: Cursor) -> None:
        cur.execute(read_sql("lock_schema"))
        cur.execute(read_sql("schema"))

    def read_watermark(self, cur: Cursor) -> int | None:
        row = cur.execute(read_sql("select_progress"), {"task": self.task_id}).fetchone()
        return None if row is None else int(row[0])

    def read_total(self, cur: Cursor) -> int | None:
        """The source total the task's last commit saw (None before the first commit)."""
        row = cur.execute(read_sql("select_progress"), {"task": self.task_id}).fetchone()
        return None if row is None or row[1] is None else int(row[1])

    def last_ref_time(self, cur: Cursor) -> datetime | None:
        """The newest reference time of the runs whose commit saved the task's progress."""
        row = cur.execute(read_sql("select_last_ref"), {"task": self.task_id}).fetchone()
        return None if row is None else row[0]

    def reset(self, cur: Cursor) -> None:
        """Forget the task's watermark and batch rows; the next plan is a first crawl."""
        self.batches.reset(cur)
        cur.execute(read_sql("reset_progress"), {"task": self.task_id})

    def save_progress(self, cur: Cursor, run_id: str, watermark: int, total: int, **fields: Any) -> None:
        """Raise the watermark (never lower it) and add a commit's counts; ``fields``: ``ref`` (the run's
        reference time), ``last_start``, ``status``, ``kept``, ``published``."""
        params = {"task": self.task_id, "run_id": run_id, "watermark": watermark, "total": total, **fields}
        cur.execute(read_sql("save_progress"), params)

    def lock(self, cur: Cursor) -> None:
        """Serialise this transaction against the task's plans and commits (held until it ends)."""
        cur.execute(read_sql("lock_task"), {"task": self.task_id})

    def schema_exists(self, cur: Cursor) -> bool:
        return cur.execute(read_sql("view/schema_exists")).fetchone() is not None

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

    def start_run(self, cur: Cursor, run_id: str, mode: str, ref: datetime, **fields: Any) -> None:
        """(Re)start a run record, counters at zero; ``fields``: ``total``, ``watermark``, ``planned``."""
        params = {"total": None, "watermark": None, "planned": 0, **fields}
        cur.execute(read_sql("start_run"), {"task": self.task_id, "run_id": run_id, "mode": mode, "ref": ref, **params})

    def read_run(self, cur: Cursor, run_id: str) -> dict[str, Any] | None:
        return fetch_dict(cur, read_sql("select_run"), {"task": self.task_id, "run_id": run_id})

    def add_batch_counts(self, cur: Cursor, run_id: str, outcome: BatchOutcome) -> int:
        """Add a finished batch's counts to its run; returns the run's shared first-crawl expiry cutoff."""
        params = {**outcome.counts.to_dict(), "task": self.task_id, "run_id": run_id, "cutoff": outcome.cutoff}
        row = cur.execute(read_sql("add_run_counts"), params).fetchone()
        return int(row[0]) if row else 0

    def add_run_error(self, cur: Cursor, run_id: str, error: str) -> None:
        """An error on the run's summary (its ``errors`` list) without an error row."""
        cur.execute(read_sql("add_run_error"), {"task": self.task_id, "run_id": run_id, "error": error[:2000]})

    def add_run_note(self, cur: Cursor, run_id: str, note: str) -> None:
        """Something an operator should see on the run's summary (its ``notes`` list) that is not an error."""
        cur.execute(read_sql("add_run_note"), {"task": self.task_id, "run_id": run_id, "note": note[:2000]})

    def record_error(
        self, cur: Cursor, run_id: str, error: str, kind: Literal["batch", "plan"], batch: Batch | None
    ) -> None:
        """An error on the run's summary and in the error table (with the offsets it concerns, if any)."""
        self.add_run_error(cur, run_id, error)
        lo, hi = (batch.lo, batch.hi) if batch else (None, None)
        cur.execute(read_sql("insert_error"), self.error_row(run_id, kind, error[:8000], lo, hi, None))

    def add_dead_letters(self, cur: Cursor, run_id: str, dead_letters: Sequence[DeadLetter]) -> None:
        rows = [
            self.error_row(run_id, "record", d.reason, d.offset, None, record_jsonb(d.record)) for d in dead_letters
        ]
        if rows:
            cur.executemany(read_sql("insert_error"), rows)

    def error_row(
        self, run_id: str, kind: str, reason: str, lo: int | None, hi: int | None, record: Any
    ) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "run_id": run_id,
            "kind": kind,
            "offset": lo,
            "offset_end": hi,
            "reason": reason,
            "record": record,
        }

    def finish_run(self, cur: Cursor, run_id: str, status: str, watermark: int | None, errors: Sequence[str]) -> None:
        """Close the run record; what it kept and published so far counts as committed."""
        params = {"task": self.task_id, "run_id": run_id, "status": status, "watermark": watermark}
        cur.execute(read_sql("finish_run"), {**params, "errors": Jsonb(list(errors))})

    def cancel_run(self, cur: Cursor, run_id: str, reason: str) -> bool:
        """Close a record still 'running' as failed; False when its commit had already closed it."""
        params = {"task": self.task_id, "run_id": run_id, "error": reason}
        return cur.execute(read_sql("cancel_run"), params).fetchone() is not None

    def prune(self, cur: Cursor, table: Literal["runs", "errors", "batches"], age_s: float, limit: int) -> int:
        """Delete up to ``limit`` old rows of one table (every task's); returns how many went."""
        return cur.execute(read_sql(f"prune/{table}"), {"age_s": age_s, "limit": limit}).rowcount

    def status_view(self, cur: Cursor) -> dict[str, Any] | None:
        """Progress, batch rows by status, the last run and the last day's errors (None before any run)."""
        if cur.execute(read_sql("view/schema_exists")).fetchone() is None:
            return None
        task = {"task": self.task_id}
        return {
            "progress": fetch_dict(cur, read_sql("view/progress"), task),
            "batches": dict(cur.execute(read_sql("view/batch_counts"), task).fetchall()),
            "last_run": fetch_dict(cur, read_sql("view/last_run"), task),
            "errors": fetch_dict(cur, read_sql("view/recent_errors"), task),
            "parked": self.batches.parked(cur),
        }

    def run_history(self, cur: Cursor, limit: int) -> dict[str, Any] | None:
        """The run still marked running with its batches done, and the last ``limit`` finished runs, newest
        first (None before any run)."""
        if cur.execute(read_sql("view/schema_exists")).fetchone() is None:
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
        if cur.execute(read_sql("view/schema_exists")).fetchone() is None:
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


@dataclass(frozen=True)
class StatusRow:
    batch: Batch
    status: int


@dataclass(frozen=True)
class ParkedBatch:
    """A batch that failed ``attempts`` times and waits for an operator, with its last error."""

    batch: Batch
    attempts: int
    error: str

    def describe(self) -> str:
        return f"[{self.batch.lo}, {self.batch.hi}) after {self.attempts} failed attempts: {self.error}"


@dataclass(frozen=True)
class BatchRows:
    """One crawl task's batch rows in ``crawler_ops.batch_status``: the shared status-table protocol with
    ``id`` = the batch's start offset, plus ``hi``, ``run_id`` and ``expired``.

    :param task_id: the crawl task (``task_name`` of its rows).
    """

    task_id: str
    table: ClassVar[StatusTable] = StatusTable("crawler_ops", "batch_status")

    def read(self, cur: Cursor, above: int) -> list[StatusRow]:
        rows = cur.execute(read_sql("select_batches"), {"task": self.task_id, "from": above}).fetchall()
        return [StatusRow(Batch(int(lo), int(hi)), int(status)) for lo, hi, status in rows]

    def done(self, cur: Cursor, above: int) -> list[Batch]:
        rows = cur.execute(read_sql("select_done"), {"task": self.task_id, "from": above}).fetchall()
        return [Batch(int(lo), int(hi)) for lo, hi in rows]

    def generations(self, cur: Cursor, batches: Sequence[Batch]) -> dict[int, str]:
        """Batch start offset -> the run that created the row; a reset creates the rows anew."""
        rows = cur.execute(read_sql("select_generations"), {"task": self.task_id, "ids": [b.lo for b in batches]})
        return {int(lo): str(run_id) for lo, run_id in rows.fetchall()}

    def insert(self, cur: Cursor, batches: Iterable[Batch], run_id: str, *, expired: bool = False) -> None:
        """New rows, pending (or done, for batches a first crawl skips as expired); existing rows stay."""
        status = DONE if expired else PENDING
        row = {"status": status, "task": self.task_id, "run_id": run_id, "expired": expired}
        params = [{**row, "lo": b.lo, "hi": b.hi} for b in batches]
        if params:
            cur.executemany(read_sql("insert_batches"), params)

    def reset(self, cur: Cursor) -> None:
        cur.execute(read_sql("reset_batches"), {"task": self.task_id})

    def prune_below(self, cur: Cursor, watermark: int) -> None:
        """Rows the watermark covers are redundant: the watermark already says they are done."""
        cur.execute(read_sql("prune_batches"), {"task": self.task_id, "watermark": watermark})

    def clip(self, cur: Cursor, total: int) -> None:
        """Rows not done that reach past a shrunken ``total`` end at it (see :func:`plan_batches`)."""
        cur.execute(read_sql("clip_batches"), {"task": self.task_id, "total": total})

    def release_finished_claims(self, cur: Cursor) -> None:
        """Claims of runs whose record is closed go back to pending now instead of after their lease."""
        cur.execute(read_sql("release_finished_claims"), {"task": self.task_id})

    def claim(self, cur: Cursor, batch: Batch, owner: str, token: str, lease_s: int) -> bool:
        """Claim ``batch`` for worker ``owner`` (run + map index); False when it is done or held by another."""
        return bool(self.table.claim_ids(cur, self.task_id, [batch.lo], token, owner, lease_s))

    def renew(self, cur: Cursor, batch: Batch, token: str) -> bool:
        """Whether this worker still holds ``batch`` (its lease renewed)."""
        return self.table.renew(cur, self.task_id, batch.lo, token)

    def complete(self, cur: Cursor, batch: Batch, token: str, *, expired: bool = False) -> bool:
        """Mark ``batch`` done (and expired: skipped by an early stop); False when another worker took it over."""
        done = bool(self.table.complete(cur, self.task_id, [batch.lo], token))
        if done and expired:
            cur.execute(read_sql("mark_expired"), {"task": self.task_id, "lo": batch.lo})
        return done

    def release(self, cur: Cursor, batch: Batch, token: str, error: str, max_attempts: int | None) -> bool:
        """A failed batch goes back to pending with its error (fenced by the claim token), or is parked at its
        ``max_attempts``-th failure; returns whether it was parked."""
        return self.table.release(cur, self.task_id, batch.lo, token, error, max_attempts) == PARKED

    def parked(self, cur: Cursor) -> list[ParkedBatch]:
        return [parked_batch(row) for row in cur.execute(read_sql("select_parked"), {"task": self.task_id})]

    def skip_parked(self, cur: Cursor, lo: int | None = None) -> list[ParkedBatch]:
        """Mark parked batches done without their records (all, or the one starting at ``lo``)."""
        rows = cur.execute(read_sql("skip_parked"), {"task": self.task_id, "lo": lo}).fetchall()
        return [parked_batch(row) for row in rows]

    def release_run(self, cur: Cursor, run_id: str) -> int:
        """Claims the run made and did not finish go back to pending (after all its chunks ended)."""
        return self.table.release_owner(cur, self.task_id, run_id)


def parked_batch(row: Sequence[Any]) -> ParkedBatch:
    lo, hi, attempts, error = row
    return ParkedBatch(Batch(int(lo), int(hi)), int(attempts), str(error or ""))


def record_jsonb(record: Any) -> Jsonb:
    """A dead letter's record for the JSONB column: capped (:func:`cap_record`), and with each NUL character, which
    JSONB cannot hold (the whole insert would fail), stored as U+FFFD."""
    text = json.dumps(cap_record(record), ensure_ascii=False, default=str)
    if "\\u0000" in text:
        text = JSON_NUL_ESCAPE.sub(lambda m: m[0] if m[0] == "\\\\" else "\\ufffd", text)
    return Jsonb(text, dumps=lambda dumped: dumped)
