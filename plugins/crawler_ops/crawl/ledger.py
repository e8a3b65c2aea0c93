"""Where a chunk records its batches: claimed, renewed, finished or failed.

Three ledgers, one per kind of run, chosen once by :func:`ledger_for`:

- :class:`StatusTableLedger` (first and incremental runs): batches are status rows claimed with a lease and a
  token; finishing one marks it done under that fence, so only the watermark's runs take part in the
  status-table protocol;
- :class:`RunRecordLedger` (replays and backfills): nothing is claimed (they never touch the watermark or the
  batch rows); finished batches only add their counts, dead letters and errors to the run record;
- :class:`DryRunLedger`: nothing is written anywhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Protocol

from crawler_ops.crawl.run import RunContext
from crawler_ops.errors import CrawlerError
from crawler_ops.hooks.store.hook import CrawlStoreHook, Cursor, finish_batch
from crawler_ops.planning import Batch
from crawler_ops.results import METRIC_COUNTERS, BatchOutcome
from crawler_ops.telemetry import metrics

log = logging.getLogger(__name__)


class Ledger(Protocol):
    def connect(self) -> None:
        """Open the connection the batches are finished on, now: the checkpoint thread does, while the chunk's
        first pages are on their way, so that their first renewal does not wait for it."""

    def claim(self, batch: Batch, then: Sequence[Batch] = ()) -> bool:
        """Take ``batch`` for this worker; False when it is done or another worker holds it. Called from the
        chunk's fetch threads, possibly at once. ``then``: the batches planned after it, which a ledger may claim
        along with it (their own claims then answer from what it got)."""

    def renew(self, batch: Batch) -> bool:
        """Whether this worker still holds ``batch`` (asked before publishing it)."""

    def finish(self, outcome: BatchOutcome, next_batch: Batch | None = None) -> tuple[int, bool]:
        """Record a batch whose messages Kafka confirmed; in the same transaction, renew ``next_batch``.

        :return: the run's first-crawl expiry cutoff (0: none) and whether this worker still holds
            ``next_batch`` (True when none was given).
        """

    def fail(self, in_flight: Sequence[Batch], error: str) -> None:
        """Give the batches in flight back with ``error`` and note it on the run; never raises."""

    def generations(self, batches: Sequence[Batch]) -> dict[int, str]:
        """Batch start offset -> the run that created the batch's row (empty when batches have no rows)."""

    def close(self) -> None:
        """Close the database connection, if any."""


class DryRunLedger:
    """A dry run claims nothing and records nothing."""

    def connect(self) -> None:
        return None

    def claim(self, batch: Batch, then: Sequence[Batch] = ()) -> bool:
        return True

    def renew(self, batch: Batch) -> bool:
        return True

    def finish(self, outcome: BatchOutcome, next_batch: Batch | None = None) -> tuple[int, bool]:
        return 0, True

    def fail(self, in_flight: Sequence[Batch], error: str) -> None:
        return None

    def generations(self, batches: Sequence[Batch]) -> dict[int, str]:
        return {}

    def close(self) -> None:
        return None


class RunRecordLedger(DryRunLedger):
    """Finished batches add their counts, dead letters and the metrics to the run record; failures are noted.

    :param store: the task's crawl store.
    :param run_id: the Airflow run.
    """

    def __init__(self, store: CrawlStoreHook, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    def connect(self) -> None:
        self.store.db  # noqa: B018 - the property opens the connection

    def finish(self, outcome: BatchOutcome, next_batch: Batch | None = None) -> tuple[int, bool]:
        with self.store.transaction() as cur:
            held = self.renew_in(cur, next_batch)
            mine = self.complete_in(cur, outcome)
            self.store.add_dead_letters(cur, self.run_id, outcome.dead_letters)
            cutoff = self.store.add_batch_counts(cur, self.run_id, outcome)
        self.counted(outcome, mine)
        return cutoff, held

    def counted(self, outcome: BatchOutcome, mine: bool) -> None:
        """The metrics of a finished batch, or a warning that another worker took it over."""
        if mine:  # counted once: a batch taken over by another worker is counted by that worker
            for counter in METRIC_COUNTERS:
                metrics.count(self.store.task_id, counter, getattr(outcome.counts, counter))
        else:
            log.warning(
                "task %s: batch [%d, %d) was re-claimed by another worker after our lease expired; its "
                "messages are published (idempotent by key) but the other worker owns its status",
                self.store.task_id,
                outcome.batch.lo,
                outcome.batch.hi,
            )

    def renew_in(self, cur: Cursor, batch: Batch | None) -> bool:
        """Whether this worker still holds ``batch`` (None: nothing to check)."""
        return True

    def complete_in(self, cur: Cursor, outcome: BatchOutcome) -> bool:
        """Whether the finished batch is this worker's to count."""
        return True

    def fail(self, in_flight: Sequence[Batch], error: str) -> None:
        try:
            with self.store.transaction() as cur:
                self.give_back(cur, in_flight, error)
                # The error row names the offsets in flight (one batch, or two adjacent ones while pipelined).
                span = Batch(min(b.lo for b in in_flight), max(b.hi for b in in_flight)) if in_flight else None
                self.store.record_error(cur, self.run_id, error, "batch", span)
        except CrawlerError:
            log.exception(
                "task %s: could not record the failure; the commit step releases this run's claims",
                self.store.task_id,
            )

    def give_back(self, cur: Cursor, in_flight: Sequence[Batch], error: str) -> None:
        return None

    def close(self) -> None:
        self.store.close()


class StatusTableLedger(RunRecordLedger):
    """Batches are status rows: claimed with a lease under this worker's token, completed and released fenced
    by it, so a worker whose lease was taken over cannot overwrite the new claim.

    :param owner: the worker (``run_id|map_index``); a claim token starts with it.
    :param token: this attempt's claim token.
    :param lease_s: how long a claim holds without renewal.
    :param max_attempts: a batch failing this often is parked: no run fetches it again, and the watermark stops
        below it, until an operator skips it.
    :param claims: a store on a connection of its own for the claims, which the fetch threads make while the
        checkpoint thread finishes batches on ``store``'s.
    """

    def __init__(
        self,
        store: CrawlStoreHook,
        run_id: str,
        owner: str,
        token: str,
        lease_s: int,
        max_attempts: int,
        claims: CrawlStoreHook,
    ) -> None:
        super().__init__(store, run_id)
        self.owner, self.token, self.lease_s, self.max_attempts = owner, token, lease_s, max_attempts
        self.claims = claims
        self._claiming = threading.Lock()
        self._asked: set[int] = set()  # batches (start offsets) a claim statement took or tried to take
        self._ahead: dict[int, bool] = {}  # batches claimed along with an earlier one -> held, until asked for

    def claim(self, batch: Batch, then: Sequence[Batch] = ()) -> bool:
        """Claims come from the fetch threads, one at a time, on their own connection (``claims``), so they do
        not wait for, or interleave with, the finish transactions on the other. A claim is one statement, committed
        on its own, which takes ``batch`` and the batches of ``then`` no statement tried yet: the claim of one of
        those answers from it. So a batch's lease may start a few pages before its fetch; the checkpoint renews it
        before the batch is produced, and a failed chunk's retry (same owner) takes its claims over at once."""
        with self._claiming:
            held = self._ahead.pop(batch.lo, None)
            if held is not None:
                return held
            group = [batch, *(b for b in then if b.lo not in self._asked)]
            self._asked.update(b.lo for b in group)
            with self.claims.single() as cur:
                won = self.claims.batches.claim_many(cur, group, self.owner, self.token, self.lease_s)
            self._ahead.update((b.lo, b.lo in won) for b in group[1:])
            return batch.lo in won

    def renew(self, batch: Batch) -> bool:
        with self.store.transaction() as cur:
            return self.store.batches.renew(cur, batch, self.token)

    def finish(self, outcome: BatchOutcome, next_batch: Batch | None = None) -> tuple[int, bool]:
        """One statement, which commits on its own (:func:`~crawler_ops.hooks.store.hook.finish_batch`); in a
        transaction with the batch's dead letters when it has some."""
        store, run_id = self.store, self.run_id
        with store.transaction() if outcome.dead_letters else store.single() as cur:
            store.add_dead_letters(cur, run_id, outcome.dead_letters)  # none: no statement
            cutoff, held, mine = finish_batch(cur, store.task_id, run_id, outcome, self.token, next_batch)
        self.counted(outcome, mine)
        return cutoff, held

    def generations(self, batches: Sequence[Batch]) -> dict[int, str]:
        with self.store.transaction() as cur:
            return self.store.batches.generations(cur, batches)

    def renew_in(self, cur: Cursor, batch: Batch | None) -> bool:
        return batch is None or self.store.batches.renew(cur, batch, self.token)

    def complete_in(self, cur: Cursor, outcome: BatchOutcome) -> bool:
        return self.store.batches.complete(cur, outcome.batch, self.token, expired=outcome.skipped_as_expired)

    def close(self) -> None:
        super().close()
        self.claims.close()

    def give_back(self, cur: Cursor, in_flight: Sequence[Batch], error: str) -> None:
        for batch in in_flight:
            if self.store.batches.release(cur, batch, self.token, error, self.max_attempts):
                message = parked_message(self.store.task_id, batch, self.max_attempts, error)
                log.error("%s", message)
                self.store.record_error(cur, self.run_id, message, "batch", batch)


def parked_message(task_id: str, batch: Batch, attempts: int, error: str) -> str:
    """What a parked batch is and what an operator can do about it."""
    return (
        f"task {task_id}: batch [{batch.lo}, {batch.hi}) is parked after {attempts} failed attempts "
        f"(last: {error}); the watermark stays below it and no run fetches it again. To let the watermark pass "
        f'it (its records are not published), trigger the DAG with {{"skip_parked": true}} or run '
        f"python -m crawler_ops skip-batch --task {task_id} --offset {batch.lo}"
    )


def ledger_for(run: RunContext, owner: str, token: str) -> Ledger:
    """The ledger of this kind of run: the only place a chunk looks at the run's mode for its bookkeeping."""
    if run.params.dry_run:
        return DryRunLedger()
    store = run.store()
    if run.uses_status_table:
        cfg = run.cfg
        return StatusTableLedger(store, run.run_id, owner, token, cfg.claim_lease_s, cfg.max_attempts, run.store())
    return RunRecordLedger(store, run.run_id)
