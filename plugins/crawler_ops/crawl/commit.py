"""Step 3 of a crawl run, the DAG's ``commit`` task: move the watermark, tidy the status table, store and
return the run summary, tell the world (webhook); also the summaries of runs that failed before or without
their commit."""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from airflow.sdk.exceptions import AirflowFailException

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams, pulled_results
from crawler_ops.errors import CrawlerError
from crawler_ops.hooks.store import CrawlStoreHook, Cursor
from crawler_ops.planning import Batch, advance_watermark
from crawler_ops.results import RunCounts, RunSummary
from crawler_ops.telemetry.notify import notify_run

log = logging.getLogger(__name__)


def commit_step(cfg: CrawlTaskConfig, context: MutableMapping[str, Any]) -> dict[str, Any]:
    """Commit the run, then tell the world: the webhook on success or failure (the Asset event: ``announce``).

    A failed run fails this task without retries (retrying the commit cannot finish batches), after one
    notification; a crash of the commit itself notifies only on its last try.
    """
    ti = context["ti"]
    chunks = ti.xcom_pull(task_ids="plan")
    try:
        run = RunContext.from_airflow(cfg, context)
    except AirflowFailException as exc:
        notify_run(cfg.notify, cfg.id, "failure", {"task": cfg.id, "run_id": context["run_id"], "errors": [str(exc)]})
        raise
    if chunks is None:
        summary = failed_plan_summary(run)
        notify_run(cfg.notify, cfg.id, "failure", summary.to_dict())
        # Fail, not skip: a skipped leaf would mark the whole run successful.
        raise AirflowFailException(
            f"task {cfg.id}: plan did not finish ({'; '.join(summary.errors)}); nothing committed, watermark unchanged"
        )
    try:
        summary = commit_run(run, chunks, pulled_results(ti) if chunks else [])
    except Exception as exc:
        if isinstance(exc, AirflowFailException) or getattr(ti, "try_number", 1) > getattr(ti, "max_tries", 0):
            notify_commit_crash(cfg, run, exc)
        raise
    log.info("crawl summary: %s", summary.to_dict())
    if summary.failed:
        notify_run(cfg.notify, cfg.id, "failure", summary.to_dict())
        raise AirflowFailException(
            f"task {cfg.id}: {len(summary.unfinished)} planned batches not done (oldest "
            f"{summary.to_dict()['oldest_unfinished']}); errors: {list(summary.errors)}. "
            f"The watermark stays at {summary.new_watermark}; the next run retries them."
        )
    notify_run(cfg.notify, cfg.id, "success", summary.to_dict())
    return summary.to_dict()


def commit_run(run: RunContext, chunks: Sequence[Mapping[str, Any]], results: Sequence[Any]) -> RunSummary:
    """Move the watermark up to the oldest batch not done, tidy the status table, store the run summary.

    Runs after every chunk finished or failed (``results``: the chunks that succeeded). The run failed when
    batches of this plan are left undone.
    """
    planned = [Batch(lo, hi) for chunk in chunks for lo, hi in chunk["batches"]]
    if run.params.dry_run:
        return dry_run_summary(run, chunks, results, len(planned))
    store = run.store()
    try:
        with store.transaction(lock=True) as cur:
            record = store.read_run(cur, run.run_id) or {}
            old = new = store.read_watermark(cur)
            unfinished: list[Batch] = []
            if run.uses_status_table:
                new, unfinished = advance(store, cur, run, record, planned, old)
            elif len(results) < len(chunks):
                unfinished = planned
            status = "success" if not unfinished else "failed"
            errors = list(record.get("errors") or [])
            store.finish_run(cur, run.run_id, status, new, errors)
    finally:
        store.close()
    return run_summary(run, record, status, len(planned), old, new, errors, unfinished)


def advance(
    store: CrawlStoreHook,
    cur: Cursor,
    run: RunContext,
    record: Mapping[str, Any],
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
        record.get("total") or 0,
        ref=run.ref,
        last_start=max((b.lo for b in planned), default=None),
        status="completed" if not unfinished else "incomplete",
        kept=record.get("kept", 0) - record.get("committed_kept", 0),
        published=record.get("published", 0) - record.get("committed_published", 0),
    )
    store.batches.prune_below(cur, new)
    store.batches.release_run(cur, run.run_id)
    return new, unfinished


def dry_run_summary(
    run: RunContext, chunks: Sequence[Mapping[str, Any]], results: Sequence[Any], planned: int
) -> RunSummary:
    """A dry run records nothing: its summary comes from the chunks' results; chunks without one failed."""
    finished = [r for r in results if isinstance(r, Mapping)]
    labels = {r.get("label") for r in finished}
    unfinished = tuple(Batch(lo, hi) for c in chunks if c.get("label") not in labels for lo, hi in c["batches"])
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
    run: RunContext,
    record: Mapping[str, Any],
    status: str,
    planned: int,
    old: int | None,
    new: int | None,
    errors: Sequence[str],
    unfinished: Sequence[Batch] = (),
) -> RunSummary:
    """The summary of a run from its run record."""
    started = record.get("started_at")
    return RunSummary(
        task=run.cfg.id,
        run_id=run.run_id,
        mode=record.get("mode"),
        status=status,
        topic=run.cfg.kafka.topic,
        ref_time=run.ref.isoformat(),
        total=record.get("total"),
        planned=planned,
        counts=RunCounts.from_dict(record),
        errors=tuple(errors),
        old_watermark=old,
        new_watermark=new,
        duration_s=round((datetime.now(UTC) - started).total_seconds(), 3) if started else None,
        unfinished=tuple(unfinished),
        notes=tuple(record.get("notes") or ()),
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
            record = store.read_run(cur, run_id) or {}
            old = store.read_watermark(cur)
    finally:
        store.close()
    log.warning("task %s run %s ended without a commit (%s); %d claims released", cfg.id, run_id, reason, released)
    run = RunContext(cfg=cfg, run_id=run_id, ref=record.get("ref_time") or datetime.now(UTC), params=RunParams())
    return run_summary(run, record, "failed", record.get("planned", 0), old, old, record.get("errors") or [])


def failed_plan_summary(run: RunContext) -> RunSummary:
    """The summary of a run whose plan failed, from its run record when the plan could write one."""
    record: Mapping[str, Any] = {}
    if not run.params.dry_run:
        store = run.store()
        try:
            with store.transaction() as cur:
                record = store.read_run(cur, run.run_id) or {}
        except (CrawlerError, psycopg.Error):
            log.exception("task %s: could not read the run record of the failed plan", run.cfg.id)
        finally:
            store.close()
    errors = list(record.get("errors") or []) or ["the plan task failed before it could record the run; see its log"]
    old = record.get("old_watermark")
    return run_summary(run, record, "failed", record.get("planned", 0), old, old, errors)


def notify_commit_crash(cfg: CrawlTaskConfig, run: RunContext, exc: BaseException) -> None:
    """The commit's last try failed: close the run record as failed (so the listener does not report the run
    a second time) and send the failure webhook, with the record's summary when PostgreSQL still answers."""
    try:
        closed = close_abandoned_run(cfg, run.run_id, f"commit: {type(exc).__name__}: {exc}")
        summary = closed.to_dict() if closed is not None else None
    except Exception:  # PostgreSQL is probably why the commit failed: notify without the record
        log.exception("task %s: could not close the run record after the commit failed", cfg.id)
        summary = {"task": cfg.id, "run_id": run.run_id, "status": "failed", "errors": [f"commit: {exc}"]}
    if summary is not None:
        notify_run(cfg.notify, cfg.id, "failure", summary)
