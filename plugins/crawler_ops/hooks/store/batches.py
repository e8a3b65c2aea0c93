"""One crawl task's batch rows in ``crawler_ops.batch_status``: planned, claimed with leases, completed under a fence
(the claim token), released or parked; the shared status-table protocol of
:mod:`crawler_ops.hooks.store.status_table`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from crawler_ops.hooks.store.db import Cursor
from crawler_ops.hooks.store.sqlfiles import read_sql
from crawler_ops.hooks.store.status_table import DONE, PARKED, PENDING, StatusTable
from crawler_ops.planning import Batch


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
        """Rows not done that reach past a shrunken ``total`` end at it (see :func:`crawler_ops.planning.iter_plan`)."""
        cur.execute(read_sql("clip_batches"), {"task": self.task_id, "total": total})

    def release_finished_claims(self, cur: Cursor) -> None:
        """Claims of runs whose record is closed go back to pending now instead of after their lease."""
        cur.execute(read_sql("release_finished_claims"), {"task": self.task_id})

    def claim(self, cur: Cursor, batch: Batch, owner: str, token: str, lease_s: int) -> bool:
        """Claim ``batch`` for worker ``owner`` (run + map index); False when it is done or held by another."""
        return bool(self.claim_many(cur, [batch], owner, token, lease_s))

    def claim_many(self, cur: Cursor, batches: Sequence[Batch], owner: str, token: str, lease_s: int) -> set[int]:
        """Claim ``batches`` in one statement (see :meth:`claim`); the start offsets of those now held."""
        return set(self.table.claim_ids(cur, self.task_id, [b.lo for b in batches], token, owner, lease_s))

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
