"""Step 1 of a run of offset batches, the DAG's ``plan`` task: count, plan its batches newest first (a normal run
from the watermark and the status rows, a replay or a backfill from its range, :mod:`.ranges`), make the run ready
when it has any (:mod:`.preflight`), group them into chunks, announce the plan."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from crawler_ops.crawl.contract import Settled
from crawler_ops.crawl.ledger import parked_message
from crawler_ops.crawl.preflight import prepare
from crawler_ops.crawl.ranges import probe_window_start, range_batches, take_batches
from crawler_ops.crawl.run import RunContext
from crawler_ops.crawl.window import counted_window_start
from crawler_ops.errors import CrawlerError, SourceError
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.store.hook import CrawlStoreHook, Cursor
from crawler_ops.hooks.store.status_table import DONE, PARKED
from crawler_ops.planning import (
    Batch,
    ChunkPlan,
    chunk_batches,
    expiry_floor,
    fill_gaps,
    iter_plan,
)
from crawler_ops.results import RunMode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """What a plan found: the batches to read (newest first) and how it got them."""

    batches: list[Batch]
    mode: RunMode
    total: int
    watermark: int | None = None
    first: bool = False


def plan_offsets(run: RunContext) -> list[ChunkPlan]:
    """Count, plan its batches (a replay's or backfill's range, else from the watermark and the status rows), make
    the run ready when it has any, group them into chunks."""
    source = run.source()
    try:
        total = count(run, source)
        planned = plan_range(run, source, total) if run.reads_range else plan_from_store(run, source, total)
        # Topics and the value schema matter only to a run that will produce: a poll that found nothing skips them.
        settled = prepare(run, source, total) if planned.batches else None
    finally:
        source.close()
    return announce(run, planned, settled)


def count(run: RunContext, source: SourceApiHook) -> int:
    """The source's total; probed from the total the last plan found when the source has no count endpoint."""
    probed = run.cfg.source.count_path is None and not source.paging.filtered
    return source.get_total(known_total(run) if probed else None)


def announce(run: RunContext, planned: Planned, settled: Settled | None) -> list[ChunkPlan]:
    """The plan's chunks, logged, noted on the run and sent to the task's webhook."""
    cfg, batches = run.cfg, planned.batches
    chunks = chunk_batches(batches, cfg.max_chunks, cfg.min_batches_per_chunk)
    log.info(
        "task %s run %s: %s plan, total=%d, watermark=%s, %d batches (%d records) in %d chunks%s",
        cfg.id,
        run.run_id,
        planned.mode,
        planned.total,
        planned.watermark,
        len(batches),
        sum(b.size for b in batches),
        len(chunks),
        " [dry run]" if run.params.dry_run else "",
    )
    if settled is not None and settled.note:
        note_on_run(run, settled.note)  # a dry run's store keeps no note
    started = {"task": cfg.id, "run_id": run.run_id, "mode": planned.mode, "ref": run.ref.isoformat()}
    run.notify("started", started | {"total": planned.total, "watermark": planned.watermark, "planned": len(batches)})
    schema_id = settled.schema_id if settled is not None else None
    return [ChunkPlan.of(chunk, early_stop=planned.first, schema_id=schema_id) for chunk in chunks]


def note_on_run(run: RunContext, note: str) -> None:
    store = run.store()
    try:
        with store.transaction() as cur:
            store.add_run_note(cur, run.run_id, note)
    finally:
        store.close()


def known_total(run: RunContext) -> int | None:
    """The total the task's last plan found: where the probe of a source without a count endpoint starts, so an
    incremental run reads the pages around it rather than galloping up from the first page."""
    store = run.store()
    try:
        with store.transaction() as cur:
            store.ensure_schema(cur)
            return store.read_total(cur)
    finally:
        store.close()


def record_plan_failure(run: RunContext, exc: BaseException) -> None:
    """Keep a failed plan in the run history (status 'failed', the error) when PostgreSQL is reachable."""
    if run.params.dry_run:
        return
    store = run.store()
    error = f"plan: {type(exc).__name__}: {exc}"
    try:
        with store.transaction() as cur:
            store.ensure_schema(cur)
        with store.transaction() as cur:
            store.start_run(cur, run.run_id, "replay" if run.params.replay else "plan", run.ref)
            store.record_error(cur, run.run_id, error, "plan", None)
            store.finish_run(cur, run.run_id, "failed", None, [error])
    except (CrawlerError, psycopg.Error):
        log.exception("task %s: could not record the failed plan in PostgreSQL", run.cfg.id)
    finally:
        store.close()


def plan_range(run: RunContext, source: SourceApiHook, total: int) -> Planned:
    """Plan a replay (the offsets it names) or a backfill (those of its interval): batches of the range, newest
    first, beside the watermark and the status rows, which it never touches; only its run is recorded."""
    batches = range_batches(run, source, total)
    mode: RunMode = "replay" if run.params.replay else "backfill"
    if not run.params.dry_run:  # a dry replay or backfill does not need the crawler database at all
        store = run.store()
        try:
            with store.transaction() as cur:
                store.ensure_schema(cur)
            with store.transaction() as cur:
                store.start_run(cur, run.run_id, mode, run.ref, total=total, planned=len(batches))
        finally:
            store.close()
    return Planned(batches, mode, total)


def plan_from_store(run: RunContext, source: SourceApiHook, total: int) -> Planned:
    """Plan a normal (first or incremental) run from the watermark and the status rows, under the task's advisory
    lock; insert the new batch rows."""
    store = run.store()
    try:
        with store.transaction() as cur:
            store.ensure_schema(cur)
        return plan_locked(run, store, source, total)
    finally:
        store.close()


def plan_locked(run: RunContext, store: CrawlStoreHook, source: SourceApiHook, total: int) -> Planned:
    """Under the task's advisory lock: reset if asked, read the watermark and rows, find a first crawl's window
    start, plan, and record the new batch rows and the run."""
    cfg = run.cfg
    with store.transaction(lock=True) as cur:
        check_total_jump(run, store.read_total(cur), total)
        watermark, shrink_note = watermark_to_plan_from(run, store, cur, total)
        start = watermark or 0
        store.batches.release_finished_claims(cur)
        store.batches.clip(cur, total)
        rows = store.batches.read(cur, above=start)
        # Parked batches are neither fetched nor planned over: they hold the watermark until skipped.
        done = [r.batch for r in rows if r.status in (DONE, PARKED)]
        pending = [r.batch for r in rows if r.status not in (DONE, PARKED)]
        floor, counted = (start, None) if watermark is not None else window_floor(run, source, total)
        planned = iter_plan(total, start, cfg.batch_size, done, pending, floor, cfg.source.paginator.aligned)
        batches = take_batches(run, planned, total, floor)
        if floor > start:
            store.batches.insert(
                cur, fill_gaps(start, floor, floor - start, [*done, *pending]), run.run_id, expired=True
            )
            log.info("task %s: first crawl; offsets below %d are older than the window: expired", cfg.id, floor)
        known = set(pending)
        store.batches.insert(cur, [b for b in batches if b not in known], run.run_id)
        mode: RunMode = "first" if watermark is None else "incremental"
        store.start_run(
            cur, run.run_id, mode, run.ref, total=total, watermark=watermark, planned=len(batches), window_count=counted
        )
        if shrink_note:
            store.add_run_error(cur, run.run_id, shrink_note)
        note_older_reference(run, store, cur)
        handle_parked(run, store, cur)
    return Planned(batches, mode, total, watermark, first=watermark is None)


def watermark_to_plan_from(
    run: RunContext, store: CrawlStoreHook, cur: Cursor, total: int
) -> tuple[int | None, str | None]:
    """The watermark (None: a first crawl, or a reset asked for) and the note of a source that shrank below it."""
    if run.params.reset:
        store.reset(cur)
        log.info("task %s: reset requested; watermark and status rows forgotten", run.cfg.id)
        return None, None
    watermark = store.read_watermark(cur)
    if watermark is not None and total < watermark:
        return handle_shrink(run, store, cur, total, watermark)
    return watermark, None


def window_floor(run: RunContext, source: SourceApiHook, total: int) -> tuple[int, int | None]:
    """Where a first crawl starts (no batches below: older than the window) and the records the source counted in
    the window (``source.window_filter``; None when searched for)."""
    cfg, counted = run.cfg, None
    if total == 0:
        return 0, None
    if cfg.source.window_filter is not None:  # counted, not searched for
        boundary, counted = counted_window_start(run, total)
    else:
        boundary = probe_window_start(source, total, run)
    return expiry_floor(boundary, cfg.batch_size, cfg.max_expired_batches), counted


def check_total_jump(run: RunContext, known: int | None, total: int) -> None:
    """A total beyond ``total_jump_factor`` times the last known one (at least ``batch_size``) is more likely a
    broken or hostile source than growth: the plan fails until a run names that total in ``confirm_total``."""
    cfg, confirmed = run.cfg, run.params.confirm_total
    if known is None or total <= cfg.total_jump_factor * max(known, cfg.batch_size) or confirmed == total:
        return
    mismatch = f" (confirm_total {confirmed} is not that total)" if confirmed is not None else ""
    raise SourceError(
        f"task {cfg.id}: the source total jumped from {known} to {total}, more than total_jump_factor "
        f"({cfg.total_jump_factor:g}) times the last known total{mismatch}; nothing planned. If the source really "
        f'grew, trigger with {{"confirm_total": {total}}}; otherwise fix the source first',
        retriable=False,
    )


def handle_parked(run: RunContext, store: CrawlStoreHook, cur: Cursor) -> None:
    """Skip the task's parked batches when the run says so (each an error of the run: its records are lost), or
    note on the run's summary that they hold the watermark."""
    if run.params.skip_parked:
        for parked in store.batches.skip_parked(cur):
            message = f"task {run.cfg.id}: parked batch {parked.describe()} skipped by the operator (skip_parked)"
            log.warning("%s", message)
            store.record_error(cur, run.run_id, message, "batch", parked.batch)
        return
    for parked in store.batches.parked(cur):
        store.add_run_note(cur, run.run_id, parked_message(run.cfg.id, parked.batch, parked.attempts, parked.error))


def note_older_reference(run: RunContext, store: CrawlStoreHook, cur: Cursor) -> None:
    """A run whose reference time is older than the last committed run's is allowed (its window still keeps
    every newer record), but an operator should see that it happened: a note on its summary."""
    last = store.last_ref_time(cur)
    if last is None or run.ref >= last:
        return
    note = (
        f"task {run.cfg.id}: reference time {run.ref.isoformat()} is older than the last committed run's "
        f"({last.isoformat()}): an older run was re-executed (cleared, or triggered with a past logical date); "
        f"its window keeps every record dated from {run.window.start.isoformat()} on"
    )
    log.warning("%s", note)
    store.add_run_note(cur, run.run_id, note)


def handle_shrink(
    run: RunContext, store: CrawlStoreHook, cur: Cursor, total: int, watermark: int
) -> tuple[int | None, str]:
    """The source reports fewer records than the watermark: warn (plan nothing), fail, or reset.

    :return: the watermark to plan from (None after a reset) and the note for the run summary.
    """
    cfg = run.cfg
    message = (
        f"task {cfg.id}: the source total shrank to {total}, below the watermark {watermark}; on_shrink={cfg.on_shrink}"
    )
    if cfg.on_shrink == "fail":
        raise SourceError(message + "; investigate the source, then trigger with reset=true", retriable=False)
    if cfg.on_shrink == "reset" and not run.params.dry_run:
        log.warning("%s: resetting", message)
        store.reset(cur)
        return None, message + ": watermark and status rows reset"
    log.warning("%s: nothing planned, watermark kept", message)
    return watermark, message + ": nothing planned, watermark kept"
