"""One worker of an executor run: a coordinator (this thread) and a runner thread that calls the function.

The coordinator owns the database connection. Each step it does whatever is due, one statement each, each
its own transaction: give back queued rows too old to start, renew the leases of rows in progress, record
finished outcomes set-wise (one UPDATE for the rows done, one for the failed ones, each fenced by the claim
token), and claim the next rows within the run's shared quota. It also abandons a call that outlives
``timeout_s``. The runner never waits for the database, and the database work never waits for the function.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.errors import ConfigError, CrawlerError, StatusTableError
from crawler_ops.executor.calls import Caller, ProcessCaller, ThreadCaller, load_function, run_calls
from crawler_ops.executor.leases import LeaseBook, LeaseTimes, Outcomes
from crawler_ops.executor.tables import Tables, executor_hook, resolve_tables
from crawler_ops.executor.udf import FunctionLoadError
from crawler_ops.hooks.store.db import CrawlerDbHook
from crawler_ops.hooks.store.status_table import PARKED, ClaimedRow

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 5.0


@dataclass
class WorkerCounts:
    """What one worker did: rows it took on (claims minus rows given back), their outcomes as recorded,
    outcomes not recorded because another worker had taken the row over, and rows given back unstarted."""

    claimed: int = 0
    done: int = 0
    failed: int = 0
    parked: int = 0
    fenced: int = 0
    given_back: int = 0

    def describe(self, quota: int, seconds: float) -> str:
        return (
            f"{self.claimed}/{quota} rows ({self.done} done, {self.failed} failed, {self.parked} parked, "
            f"{self.fenced} fenced, {self.given_back} given back), {self.claimed / max(seconds, 1e-6):.1f} rows/s"
        )


@contextmanager
def statements(hook: CrawlerDbHook) -> Iterator[psycopg.Cursor[Any]]:
    """A cursor on the hook's connection, which is in autocommit: each statement is its own transaction, so a
    claim holds the run's quota row only while it runs in the server, never across a round trip."""
    try:
        with hook.db.cursor() as cur:
            yield cur
    except psycopg.OperationalError as exc:
        raise StatusTableError(f"executor {hook.task_id}: PostgreSQL failed: {exc}") from exc


class ExecutorWorker:
    """One worker of an executor run.

    :param cfg: the executor task.
    :param run_id: the run; its workers share the quota ``cycle_index``.
    :param index: the worker's index; a retry of the same worker first gives back what its earlier try held.
    """

    def __init__(self, cfg: ExecutorTaskConfig, run_id: str, index: int, hook: CrawlerDbHook | None = None) -> None:
        self.cfg, self.run_id = cfg, run_id
        self.owner = f"{run_id}|w{index}"
        self.token = f"{self.owner}|{uuid.uuid4().hex[:12]}"
        self.hook = hook or executor_hook(cfg)
        self.owns_hook = hook is None
        self.counts = WorkerCounts()
        self.book = LeaseBook(LeaseTimes.for_period(cfg.period), cfg.claim_batch)
        self.generation = -1
        self.callers: list[Caller] = []
        self.dry = False  # the last claim found nothing while the runner was busy

    def run(self) -> dict[str, int]:
        started = last_log = time.monotonic()
        try:
            self.start_runner(self.open())
            while not self.step():
                self.book.handoff.wait()
                if time.monotonic() - last_log >= PROGRESS_EVERY_S:
                    self.log_progress(started)
                    last_log = time.monotonic()
        finally:
            self.book.handoff.stop()
            for caller in self.callers:
                caller.close()
            if self.owns_hook:
                self.hook.close()
        self.log_progress(started)
        return asdict(self.counts)

    def open(self) -> Caller:
        """Resolve the tables, join the run's quota, give back what an earlier try of this worker held, and load
        the function; every statement after this commits on its own."""
        with self.hook.transaction() as cur:
            self.tables = resolve_tables(cur, self.cfg)
            self.rows, self.parts = self.tables.rows(self.cfg.name), self.tables.parts()
            self.rows.open_run(cur, self.run_id, self.cfg.cycle_index)
            earlier = self.rows.release_owner(cur, self.run_id, self.owner)
        self.hook.db.autocommit = True
        if earlier:
            log.info("executor %s: gave back %d rows an earlier try of this worker held", self.cfg.name, earlier)
        return self.first_caller(self.tables)

    def first_caller(self, tables: Tables) -> Caller:
        """The caller of the configured isolation; the function must load, or the worker fails at once."""
        if self.cfg.isolation == "thread":
            return ThreadCaller(load_function(self.cfg), self.cfg.function_style, tables.names)
        caller = ProcessCaller.for_executor(self.cfg, tables.names)
        try:
            caller.start()
        except FunctionLoadError as exc:
            raise ConfigError(f"executor '{self.cfg.name}': {exc}") from exc
        return caller

    def start_runner(self, caller: Caller) -> None:
        self.callers.append(caller)
        self.generation = self.book.generation
        name = f"udf-{self.cfg.name}-{self.generation}"
        threading.Thread(target=run_calls, args=(self.book, self.generation, caller), name=name, daemon=True).start()

    def replace_runner(self) -> None:
        """The runner was let go (timeout, lost lease): stop its call where possible and start another."""
        self.callers[-1].abort()
        if self.cfg.isolation == "process":
            self.start_runner(ProcessCaller.for_executor(self.cfg, self.tables.names))
        else:
            previous = self.callers[-1]
            assert isinstance(previous, ThreadCaller)
            self.start_runner(ThreadCaller(previous.function, previous.style, previous.names))

    def step(self) -> bool:
        """Do what is due; True when the worker is finished (its runner idle, and nothing more to claim)."""
        self.watch_runner()
        idle = self.book.idle()
        outcomes, stale, due = self.book.take_outcomes(), self.book.stale(), self.book.due()
        want = 0 if self.dry and not idle else self.book.claim_size()
        if not (outcomes or stale or due or want):
            return False
        leased = time.monotonic()
        with statements(self.hook) as cur:
            given = (
                self.rows.give_back(cur, self.run_id, stale, self.token, self.cfg.row_retry_delay_s) if stale else []
            )
            kept = self.rows.renew(cur, due, self.token) if due else []
            self.record(cur, outcomes)
            claimed = self.rows.claim(cur, self.parts, self.run_id, self.token, want, self.lease) if want else []
        lost = self.book.renewed(due, kept, leased) if due else []
        self.book.add(claimed, leased)
        self.tally(claimed, given, lost)
        self.dry = bool(want) and not claimed
        return self.dry and idle

    def watch_runner(self) -> None:
        """Fail with a crashed runner; abandon a call past ``timeout_s`` and start a fresh runner after it."""
        if self.book.handoff.crash is not None:
            raise CrawlerError(f"executor {self.cfg.name}: the runner thread failed") from self.book.handoff.crash
        overdue = self.book.overdue(self.cfg.timeout_s)
        if overdue is not None:
            log.warning("executor %s: row %s timed out after %ss", self.cfg.name, overdue.id, self.cfg.timeout_s)
        if self.book.generation != self.generation:
            self.replace_runner()

    def tally(self, claimed: list[ClaimedRow], given: list[int], lost: list[int]) -> None:
        """Count the rows a step claimed, gave back unstarted and lost while in progress."""
        self.counts.claimed += len(claimed) - len(given)
        self.counts.given_back += len(given)
        self.counts.fenced += len(lost)
        if lost:
            log.warning("executor %s: rows %s were taken over by another worker while in progress", self.cfg.name, lost)
        if given:
            hold = self.book.times.hold_limit
            log.info("executor %s: gave back %d rows that could not start within %ss", self.cfg.name, len(given), hold)

    @property
    def lease(self) -> tuple[int, int]:
        return self.cfg.period, self.cfg.row_retry_delay_s

    def record(self, cur: psycopg.Cursor[Any], outcomes: Outcomes) -> None:
        """Outcomes set-wise: done rows in one statement, failed rows in another, each fenced by the token."""
        done = self.rows.complete(cur, outcomes.done, self.token) if outcomes.done else []
        failed = self.rows.fail(cur, outcomes.failed, self.token, self.cfg.max_attempts) if outcomes.failed else {}
        parked = sum(1 for status in failed.values() if status == PARKED)
        fenced = len(outcomes) - len(done) - len(failed)
        self.counts.done += len(done)
        self.counts.parked += parked
        self.counts.failed += len(failed) - parked
        self.counts.fenced += fenced
        if fenced:
            log.warning(
                "executor %s: %d rows were taken over by another worker after their lease (period=%ss) expired; "
                "their outcomes here were not recorded",
                self.cfg.name,
                fenced,
                self.cfg.period,
            )

    def log_progress(self, started: float) -> None:
        worker = self.owner.rsplit("|", 1)[-1]
        progress = self.counts.describe(self.cfg.cycle_index, time.monotonic() - started)
        log.info("executor %s %s: %s", self.cfg.name, worker, progress)


def run_worker(cfg: ExecutorTaskConfig, run_id: str, index: int, hook: CrawlerDbHook | None = None) -> dict[str, int]:
    """Run worker ``index`` of the run ``run_id`` until the run's quota is used or no row is claimable."""
    return ExecutorWorker(cfg, run_id, index, hook).run()
