"""The crawl steps' store in PostgreSQL (schema ``crawler_ops``): a crawl task's watermark, its run records, errors
and dead letters, and its batch rows (:class:`~crawler_ops.hooks.store.batches.BatchRows`).

Planning and committing of one task are serialised by a transaction-scoped advisory lock
(``transaction(lock=True)``); batches are claimed with leases and completed under a fence (the claim token), so two
runs never crawl the same batch at the same time. The other clients of the crawler database have hooks of their own:
:mod:`~crawler_ops.hooks.store.reports`, :mod:`~crawler_ops.hooks.store.retention`,
:mod:`~crawler_ops.hooks.store.progress_import`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, cached_property
from typing import Any, Literal

from psycopg.types.json import Jsonb

from crawler_ops.drift import MAX_FIELDS, OTHER, FieldProfile
from crawler_ops.hooks.store.batches import BatchRows
from crawler_ops.hooks.store.db import CrawlerDbHook, Cursor, create_schema, fetch_dict
from crawler_ops.hooks.store.sqlfiles import read_sql
from crawler_ops.message.records import cap_record
from crawler_ops.planning import Batch
from crawler_ops.results import BatchOutcome, DeadLetter, RunRecord

# An escaped backslash or an escaped NUL in JSON text, matched left to right: a backslash followed by "u0000" is text.
JSON_NUL_ESCAPE = re.compile(r"\\(?:\\|u0000)")


@dataclass(frozen=True)
class Baseline:
    """A task's field baseline: the summed profiles of its successful runs, the last run added, and the baseline
    before it (what a repeated commit of that run compares with again)."""

    profile: FieldProfile
    run_id: str
    before: FieldProfile


@dataclass(frozen=True)
class DriftRows:
    """One crawl task's field drift: its baseline (``crawler_ops.field_baseline``) and each run's drift on its record.
    (A finished batch's profile is added to its run with its counts: :meth:`CrawlStoreHook.add_batch_counts`.)

    :param task_id: the crawl task.
    """

    task_id: str

    def read_baseline(self, cur: Cursor) -> Baseline | None:
        """The task's field baseline (None before a successful run profiled a record)."""
        row = cur.execute(read_sql("select_baseline"), {"task": self.task_id}).fetchone()
        if row is None:
            return None
        profile, run_id, before = row
        return Baseline(FieldProfile.from_json(profile), str(run_id), FieldProfile.from_json(before))

    def save_baseline(self, cur: Cursor, run_id: str, profile: FieldProfile, before: FieldProfile) -> None:
        """The baseline once run ``run_id`` added its profile to ``before``."""
        params = {"task": self.task_id, "run_id": run_id, "before": Jsonb(before.to_json())}
        cur.execute(read_sql("save_baseline"), {**params, "profile": Jsonb(profile.to_json())})

    def save(self, cur: Cursor, run_id: str, drift: Mapping[str, Any]) -> None:
        """A run's drift on its record."""
        cur.execute(read_sql("save_drift"), {"task": self.task_id, "run_id": run_id, "drift": Jsonb(dict(drift))})


class CrawlStoreHook(CrawlerDbHook):
    """What the crawl steps (plan, chunk, commit) read and write of one crawl task: its progress (the watermark),
    run records, errors and dead letters (schema ``crawler_ops``); its batch status rows are :attr:`batches`.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param task_id: the crawl task.
    """

    @cached_property
    def batches(self) -> BatchRows:
        return BatchRows(self.task_id)

    @cached_property
    def drift(self) -> DriftRows:
        return DriftRows(self.task_id)

    def ensure_schema(self, cur: Cursor) -> None:
        create_schema(cur)

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

    def save_progress(
        self,
        cur: Cursor,
        run_id: str,
        watermark: int,
        total: int,
        *,
        ref: datetime,
        last_start: int | None,
        status: str,
        kept: int,
        published: int,
    ) -> None:
        """Raise the watermark (never lower it) and add a commit's counts.

        :param ref: the run's reference time (the progress keeps the newest).
        :param last_start: the start offset of the newest planned batch; None (planned nothing) keeps the last one.
        :param status: ``completed``, or ``incomplete`` when planned batches are left.
        :param kept: records kept since the run's last commit (added to the task's count).
        :param published: records published since the run's last commit (added to the task's count).
        """
        params = {"task": self.task_id, "run_id": run_id, "watermark": watermark, "total": total, "ref": ref}
        counts = {"last_start": last_start, "status": status, "kept": kept, "published": published}
        cur.execute(read_sql("save_progress"), {**params, **counts})

    def start_run(
        self,
        cur: Cursor,
        run_id: str,
        mode: str,
        ref: datetime,
        *,
        total: int | None = None,
        watermark: int | None = None,
        planned: int = 0,
        window_count: int | None = None,
    ) -> None:
        """(Re)start a run record, counters at zero.

        :param total: the source's total the run planned against (None: it did not ask, or failed before).
        :param watermark: the watermark the run planned from (``old_watermark``; None on a first crawl).
        :param planned: how many batches the run planned.
        :param window_count: the records the source counted in a first crawl's window (``source.window_filter``).
        """
        params = {"task": self.task_id, "run_id": run_id, "mode": mode, "ref": ref, "window_count": window_count}
        cur.execute(read_sql("start_run"), {**params, "total": total, "watermark": watermark, "planned": planned})

    def read_run(self, cur: Cursor, run_id: str) -> RunRecord | None:
        row = fetch_dict(cur, read_sql("select_run"), {"task": self.task_id, "run_id": run_id})
        return None if row is None else RunRecord.from_row(row)

    def add_batch_counts(self, cur: Cursor, run_id: str, outcome: BatchOutcome) -> int:
        """Add a finished batch's counts and drift profile to its run; returns the run's shared first-crawl expiry
        cutoff."""
        row = cur.execute(read_sql("add_run_counts"), count_params(self.task_id, run_id, outcome)).fetchone()
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


def record_jsonb(record: Any) -> Jsonb:
    """A dead letter's record for the JSONB column: capped (:func:`cap_record`), and with each NUL character, which
    JSONB cannot hold (the whole insert would fail), stored as U+FFFD."""
    text = json.dumps(cap_record(record), ensure_ascii=False, default=str)
    if "\\u0000" in text:
        text = JSON_NUL_ESCAPE.sub(lambda m: m[0] if m[0] == "\\\\" else "\\ufffd", text)
    return Jsonb(text, dumps=lambda dumped: dumped)


def finish_batch(
    cur: Cursor, task_id: str, run_id: str, outcome: BatchOutcome, token: str, renew: Batch | None
) -> tuple[int, bool, bool]:
    """In one statement: renew the claim of ``renew`` (the batch to be produced next), complete the finished batch of
    crawl task ``task_id`` (fenced by ``token``) and add its counts to its run. Returns the run's shared first-crawl
    expiry cutoff, whether ``renew`` is still held (True when None), and whether the finished batch was this token's."""
    params = {
        **count_params(task_id, run_id, outcome),
        "token": token,
        "lo": outcome.batch.lo,
        "skipped": outcome.skipped_as_expired,
        "renew": [] if renew is None else [renew.lo],
    }
    cutoff, renewed, completed = cur.execute(finish_batch_sql(), params).fetchone() or (0, 0, 0)
    return int(cutoff or 0), renew is None or renewed == 1, completed == 1


def count_params(task_id: str, run_id: str, outcome: BatchOutcome) -> dict[str, Any]:
    """The parameters of ``add_run_counts.sql``: a finished batch's counts and drift profile."""
    params = {**outcome.counts.to_dict(), "task": task_id, "run_id": run_id, "cutoff": outcome.cutoff}
    profile = outcome.profile
    drift = {
        "drift_sampled": profile.sampled_records,
        "drift_fields": Jsonb(profile.to_json()["fields"]),
        "max_fields": MAX_FIELDS,
        "other": OTHER,
    }
    return {**params, **drift}


@cache
def finish_batch_sql() -> str:
    """``finish_batch.sql`` with the run's counts (``add_run_counts.sql``) as its last step."""
    return read_sql("finish_batch").format(counts=read_sql("add_run_counts"))
