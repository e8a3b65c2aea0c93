"""Step 3 of a crawl run, the DAG's ``commit`` task (:class:`crawler_ops.operators.crawl.CommitCrawlOperator`):
move the watermark, tidy the status table, store the run summary; also the summaries of runs that failed before or
without their commit (a failed plan, a run abandoned in the UI or whose commit crashed)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext
from crawler_ops.crawl.window import window_failure
from crawler_ops.drift import Drift, FieldProfile
from crawler_ops.errors import CrawlerError
from crawler_ops.hooks.store.hook import CrawlStoreHook, Cursor
from crawler_ops.planning import Batch, ChunkPlan, advance_watermark
from crawler_ops.results import RunCounts, RunRecord, RunStatus, RunSummary
from crawler_ops.telemetry.notify import notify_run

log = logging.getLogger(__name__)

#: How a run's strategy moves the watermark: (store, cursor, run, its record, planned batches, old watermark) ->
#: (new watermark, planned batches left undone).
Advance = Callable[
    [CrawlStoreHook, Cursor, RunContext, RunRecord | None, Sequence[Batch], int | None], tuple[int | None, list[Batch]]
]


def commit(run: RunContext, chunks: Sequence[ChunkPlan], results: Sequence[Any], advance: Advance) -> RunSummary:
    """Move the watermark up to the oldest batch not done (``advance``: as the run's strategy does), tidy the status
    table, store the run summary.

    Runs after every chunk finished or failed (``results``: the chunks that succeeded). The run failed when
    batches of this plan are left undone.
    """
    planned = [batch for chunk in chunks for batch in chunk.batches]
    if run.params.dry_run:
        return dry_run_summary(run, chunks, results, len(planned))
    store = run.store()
    try:
        with store.transaction(lock=True) as cur:
            record = store.read_run(cur, run.run_id)
            old = new = store.read_watermark(cur)
            unfinished: list[Batch] = []
            failure = window_failure(run, record, complete=len(results) == len(chunks))
            if run.uses_status_table and failure is not None:  # a first crawl: it leaves nothing behind
                store.reset(cur)
            elif run.uses_status_table:
                new, unfinished = advance(store, cur, run, record, planned, old)
            elif len(results) < len(chunks):
                unfinished = planned
            errors = list(record.errors) if record else []
            if failure is not None:
                errors.append(failure)
            status: RunStatus = "success" if not unfinished and failure is None else "failed"
            store.finish_run(cur, run.run_id, status, new, errors)
            drift = None if record is None else record_drift(store, cur, run, record.profile, status)
    finally:
        store.close()
    if drift is not None:
        log.log(logging.WARNING if drift.drifted else logging.INFO, "task %s: %s", run.cfg.id, drift.describe())
    return run_summary(
        run.cfg,
        run.run_id,
        run.ref,
        record,
        status=status,
        planned=len(planned),
        old=old,
        new=new,
        errors=errors,
        unfinished=unfinished,
        drift=None if drift is None else drift.to_json(),
    )


def record_drift(
    store: CrawlStoreHook, cur: Cursor, run: RunContext, profile: FieldProfile, status: RunStatus
) -> Drift:
    """Compare the run's profile with the task's baseline and store the drift on the run record; a successful run
    adds its profile to the baseline. A repeated commit of the run that last added to it compares with, and adds to,
    the baseline from before that run again, so its report stays the same and nothing is counted twice."""
    run_id = run.run_id
    saved = store.drift.read_baseline(cur)
    base = FieldProfile() if saved is None else saved.before if saved.run_id == run_id else saved.profile
    drift = base.compare(profile, run.cfg.drift_sample)
    store.drift.save(cur, run_id, drift.to_json())
    if status == "success" and profile:
        store.drift.save_baseline(cur, run_id, base + profile, base)
    return drift


def advance_offsets(
    store: CrawlStoreHook,
    cur: Cursor,
    run: RunContext,
    record: RunRecord | None,
    planned: Sequence[Batch],
    old: int | None,
) -> tuple[int | None, list[Batch]]:
    """Raise the watermark over the done batches, save progress, prune the rows it covers, give back the
    run's claims. Returns the new watermark and the planned batches left undone."""
    done = store.batches.done(cur, above=0)
    if old is None and not done:
        # Nothing is done yet (an empty source, or every batch failed): without a watermark the next run is
        # still a first crawl, which searches for the window instead of reading the whole history.
        store.batches.release_run(cur, run.run_id)
        return None, list(planned)
    new = advance_watermark(old or 0, done)
    # Rows below the watermark were pruned by an earlier commit: the watermark says they are done.
    done_set = set(done)
    unfinished = [b for b in planned if b.hi > new and b not in done_set]
    # The totals get what this run kept and published since its last commit: a retried commit adds
    # nothing, a commit after clearing failed chunks adds what they crawled.
    store.save_progress(
        cur,
        run.run_id,
        new,
        (record.total if record else None) or 0,
        ref=run.ref,
        last_start=max((b.lo for b in planned), default=None),
        status="completed" if not unfinished else "incomplete",
        kept=record.uncommitted_kept if record else 0,
        published=record.uncommitted_published if record else 0,
    )
    store.batches.prune_below(cur, new)
    store.batches.release_run(cur, run.run_id)
    return new, unfinished


def dry_run_summary(run: RunContext, chunks: Sequence[ChunkPlan], results: Sequence[Any], planned: int) -> RunSummary:
    """A dry run records nothing: its summary comes from the chunks' results; chunks without one failed."""
    finished = [r for r in results if isinstance(r, Mapping)]
    labels = {r.get("label") for r in finished}
    unfinished = tuple(batch for chunk in chunks if chunk.label not in labels for batch in chunk.batches)
    return RunSummary(
        task=run.cfg.id,
        run_id=run.run_id,
        mode="dry_run",
        status="failed" if unfinished else "success",
        topic=run.cfg.kafka.topic,
        ref_time=run.ref.isoformat(),
        planned=planned,
        counts=RunCounts.total([RunCounts.from_dict(r) for r in finished]),
        unfinished=unfinished,
    )


def run_summary(
    cfg: CrawlTaskConfig,
    run_id: str,
    ref: datetime,
    record: RunRecord | None,
    *,
    status: RunStatus,
    planned: int,
    old: int | None,
    new: int | None,
    errors: Sequence[str],
    unfinished: Sequence[Batch] = (),
    drift: Mapping[str, Any] | None = None,
) -> RunSummary:
    """The summary of a run of task ``cfg`` from its run record (None: the run has none)."""
    started = record.started_at if record else None
    return RunSummary(
        task=cfg.id,
        run_id=run_id,
        mode=record.mode if record else None,
        status=status,
        topic=cfg.kafka.topic,
        ref_time=ref.isoformat(),
        total=record.total if record else None,
        planned=planned,
        counts=record.counts if record else RunCounts(),
        errors=tuple(errors),
        old_watermark=old,
        new_watermark=new,
        duration_s=round((datetime.now(UTC) - started).total_seconds(), 3) if started else None,
        unfinished=tuple(unfinished),
        notes=record.notes if record else (),
        drift=drift,
    )


def close_abandoned_run(cfg: CrawlTaskConfig, run_id: str, reason: str) -> RunSummary | None:
    """A DAG run failed without its commit finishing the record: mark the record failed, give its claims back.

    :return: the run summary when this closed the record; None when the commit had already finished it (or
        there is no record), so the caller notifies only runs nobody reported.
    """
    store = CrawlStoreHook(cfg.postgres_conn_id, cfg.id)
    try:
        with store.transaction(lock=True) as cur:
            # Batch rows before the run record, in the order a worker finishing a batch takes them, so the two
            # never deadlock. Releasing the claims of a run its commit already closed changes nothing.
            released = store.batches.release_run(cur, run_id)
            if not store.cancel_run(cur, run_id, reason):
                return None
            record = store.read_run(cur, run_id)
            old = store.read_watermark(cur)
    finally:
        store.close()
    log.warning("task %s run %s ended without a commit (%s); %d claims released", cfg.id, run_id, reason, released)
    if record is None:  # cancel_run has just closed it in this transaction: it is there
        return None
    return run_summary(
        cfg,
        run_id,
        record.ref_time,
        record,
        status="failed",
        planned=record.planned,
        old=old,
        new=old,
        errors=record.errors,
    )


def failed_plan_summary(run: RunContext) -> RunSummary:
    """The summary of a run whose plan failed, from its run record when the plan could write one."""
    record: RunRecord | None = None
    if not run.params.dry_run:
        store = run.store()
        try:
            with store.transaction() as cur:
                record = store.read_run(cur, run.run_id)
        except (CrawlerError, psycopg.Error):
            log.exception("task %s: could not read the run record of the failed plan", run.cfg.id)
        finally:
            store.close()
    errors = list(record.errors if record else ()) or [
        "the plan task failed before it could record the run; see its log"
    ]
    old = record.old_watermark if record else None
    planned = record.planned if record else 0
    return run_summary(
        run.cfg, run.run_id, run.ref, record, status="failed", planned=planned, old=old, new=old, errors=errors
    )


def notify_commit_crash(cfg: CrawlTaskConfig, run_id: str, exc: BaseException) -> None:
    """The commit's last try failed: close the run record as failed (so the listener does not report the run
    a second time) and send the failure webhook, with the record's summary when PostgreSQL still answers."""
    try:
        closed = close_abandoned_run(cfg, run_id, f"commit: {type(exc).__name__}: {exc}")
        summary = closed.to_dict() if closed is not None else None
    except Exception:  # PostgreSQL is probably why the commit failed: notify without the record
        log.exception("task %s: could not close the run record after the commit failed", cfg.id)
        summary = {"task": cfg.id, "run_id": run_id, "status": "failed", "errors": [f"commit: {exc}"]}
    if summary is not None:
        notify_run(cfg.notify, cfg.id, "failure", summary)
