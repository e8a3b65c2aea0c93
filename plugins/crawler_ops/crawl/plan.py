"""Step 1 of a crawl run, the DAG's ``plan`` task (:class:`crawler_ops.operators.crawl.PlanCrawlOperator`): count,
read the watermark and status rows, plan batches newest first, group them into chunks (or, for replays and backfills,
the offsets to read)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import islice

import psycopg

from crawler_ops.crawl.ledger import parked_message
from crawler_ops.crawl.preflight import ensure_topics, settle_schema
from crawler_ops.crawl.run import RunContext
from crawler_ops.crawl.window import counted_window_start
from crawler_ops.errors import CrawlerError, SourceError
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.store.hook import CrawlStoreHook, Cursor
from crawler_ops.hooks.store.status_table import DONE, PARKED
from crawler_ops.message.filtering import DateRule, record_date
from crawler_ops.message.pages import record_head
from crawler_ops.planning import (
    Batch,
    ChunkPlan,
    chunk_batches,
    expiry_floor,
    fill_gaps,
    iter_gaps,
    iter_plan,
    search_bracket,
)
from crawler_ops.results import RunMode
from crawler_ops.telemetry.notify import notify_run

log = logging.getLogger(__name__)


def plan_offsets(run: RunContext) -> list[ChunkPlan]:
    """Count, read the watermark and status rows, plan batches newest first, group them into chunks."""
    cfg, params = run.cfg, run.params
    source = run.source()
    try:
        probed = cfg.source.count_path is None and not source.paging.filtered
        total = source.get_total(known_total(run) if probed else None)
        if not params.dry_run:
            ensure_topics(run)
        settled = settle_schema(run, source, total)
        if params.replay or run.backfill_interval is not None:
            lo, hi = range_to_read(run, source, total)
            batches = take_batches(
                run, iter_gaps(lo, hi, cfg.batch_size, aligned=cfg.source.paginator.aligned), total, lo
            )
            mode: RunMode = "replay" if params.replay else "backfill"
            watermark, first = None, False
            if not params.dry_run:
                store = run.store()
                try:
                    with store.transaction() as cur:
                        store.ensure_schema(cur)
                    with store.transaction() as cur:
                        store.start_run(cur, run.run_id, mode, run.ref, total=total, planned=len(batches))
                finally:
                    store.close()
        else:
            batches, mode, watermark, first = plan_from_store(run, source, total)
    finally:
        source.close()
    chunks = chunk_batches(batches, cfg.max_chunks, cfg.min_batches_per_chunk)
    log.info(
        "task %s run %s: %s plan, total=%d, watermark=%s, %d batches (%d records) in %d chunks%s",
        cfg.id,
        run.run_id,
        mode,
        total,
        watermark,
        len(batches),
        sum(b.size for b in batches),
        len(chunks),
        " [dry run]" if params.dry_run else "",
    )
    if settled is not None and settled.note and not params.dry_run:
        note_on_run(run, settled.note)
    if not params.dry_run:
        started = {"task": cfg.id, "run_id": run.run_id, "mode": mode, "ref": run.ref.isoformat(), "total": total}
        notify_run(cfg.notify, cfg.id, "started", started | {"watermark": watermark, "planned": len(batches)})
    schema_id = settled.schema_id if settled is not None else None
    return [ChunkPlan.of(chunk, early_stop=first, schema_id=schema_id) for chunk in chunks]


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


def plan_from_store(
    run: RunContext, source: SourceApiHook, total: int
) -> tuple[list[Batch], RunMode, int | None, bool]:
    """Plan a normal (first or incremental) run under the task's advisory lock; insert new batch rows."""
    store = run.store()
    try:
        with store.transaction() as cur:
            store.ensure_schema(cur)
        return plan_locked(run, store, source, total)
    finally:
        store.close()


def plan_locked(
    run: RunContext, store: CrawlStoreHook, source: SourceApiHook, total: int
) -> tuple[list[Batch], RunMode, int | None, bool]:
    """Under the task's advisory lock: reset if asked, read the watermark and rows, probe a first crawl's window
    start, plan, and record the new batch rows and the run."""
    cfg, params = run.cfg, run.params
    with store.transaction(lock=True) as cur:
        check_total_jump(run, store.read_total(cur), total)
        if params.reset and not params.dry_run:
            store.reset(cur)
            log.info("task %s: reset requested; watermark and status rows forgotten", cfg.id)
        watermark = None if params.reset else store.read_watermark(cur)
        shrink_note = None
        if watermark is not None and total < watermark:
            watermark, shrink_note = handle_shrink(run, store, cur, total, watermark)
        first = watermark is None
        mode: RunMode = "first" if first else "incremental"
        start = watermark or 0
        if not params.dry_run:
            store.batches.release_finished_claims(cur)
            store.batches.clip(cur, total)
        rows = store.batches.read(cur, above=start)
        # Parked batches are neither fetched nor planned over: they hold the watermark until skipped.
        done = [r.batch for r in rows if r.status in (DONE, PARKED)]
        pending = [r.batch for r in rows if r.status not in (DONE, PARKED)]
        floor, counted = start, None
        if first and total > 0:
            if cfg.source.window_filter is not None:  # counted, not searched for
                boundary, counted = counted_window_start(run, total)
            else:
                boundary = probe_window_start(source, total, run)
            floor = max(start, expiry_floor(boundary, cfg.batch_size, cfg.max_expired_batches))
        planned = iter_plan(total, start, cfg.batch_size, done, pending, floor, cfg.source.paginator.aligned)
        batches = take_batches(run, planned, total, floor)
        if not params.dry_run:
            if floor > start:
                expired = fill_gaps(start, floor, floor - start, [*done, *pending])
                store.batches.insert(cur, expired, run.run_id, expired=True)
                log.info(
                    "task %s: first crawl; offsets below %d are older than the window, recorded as expired",
                    cfg.id,
                    floor,
                )
            known = set(pending)
            store.batches.insert(cur, [b for b in batches if b not in known], run.run_id)
            store.start_run(
                cur,
                run.run_id,
                mode,
                run.ref,
                total=total,
                watermark=watermark,
                planned=len(batches),
                window_count=counted,
            )
            if shrink_note:
                store.add_run_error(cur, run.run_id, shrink_note)
        note_older_reference(run, store, cur)
        if not params.dry_run:
            handle_parked(run, store, cur)
    return batches, mode, watermark, first


def take_batches(run: RunContext, planned: Iterator[Batch], total: int, start: int) -> list[Batch]:
    """The newest ``max_batches`` of a plan (newest first), or all of it; more than ``max_planned_batches`` fails
    the plan, having made no more than one batch over that cap."""
    cfg, wanted = run.cfg, run.params.max_batches
    cap = cfg.max_planned_batches
    batches = list(islice(planned, min(wanted, cap + 1) if wanted else cap + 1))
    if len(batches) > cap:
        raise SourceError(
            f"task {cfg.id}: the source total {total} leaves more than max_planned_batches ({cap}) batches of "
            f"{cfg.batch_size} records to plan above offset {start}; nothing planned. If the total is right, trigger "
            f"with max_batches (at most {cap}) to crawl the newest part first, or raise max_planned_batches",
            retriable=False,
        )
    return batches


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
    if not run.params.dry_run:
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


def probe_offset(
    source: SourceApiHook, total: int, rule: DateRule, moment: datetime, width: int = 1, within: int = 1
) -> tuple[int, int]:
    """Search for the first offset whose record is not older than ``moment`` (records roughly in time order),
    reading ``width`` one-record pages at a time, until it is known within fewer than ``within`` offsets:
    ``log(total / within) / log(width + 1)`` rounds of one request time each. Returns ``(lo, hi)``, the offset
    lying in ``[lo, hi]``. A record without a usable date counts as not older."""

    def older(offset: int) -> bool:
        page = source.get_page(offset, 1)
        found = record_date(record_head(page[0], rule.fields), rule.fields, rule.tz)[0] if page else None
        return found is not None and found < moment

    with ThreadPoolExecutor(width, thread_name_prefix="probe") as pool:
        lo, hi, _ = search_bracket(total, width, within, lambda points: list(pool.map(older, points)))
    return lo, hi


def probe_window_start(source: SourceApiHook, total: int, run: RunContext) -> int:
    """Where a first crawl's window starts: offsets below are older than the window. Searched to within a batch
    and rounded down, so the crawl reads at most one batch more than the exact start would (filtered out as
    expired), for half the rounds of a search down to the record at 1,000 records a batch."""
    cfg = run.cfg
    lo, hi = probe_offset(source, total, cfg.filter.rule, run.window.start, cfg.source.concurrency, cfg.batch_size)
    log.info("task %s: probed the window start in offsets [%d, %d] of %d; it is taken at %d", cfg.id, lo, hi, total, lo)
    return lo


def range_to_read(run: RunContext, source: SourceApiHook, total: int) -> tuple[int, int]:
    """The offsets a replay names, a backfill's filtered view (``source.window_filter``: all of it), or those a
    backfill finds by probing its interval's two ends, each to within a batch and rounded outwards (then one batch of
    margin each side for records that are only roughly in time order)."""
    if run.params.replay:
        return run.params.replay_from or 0, min(run.params.replay_to or 0, total)
    if run.reads_filtered_view:  # the total is the filtered view's count
        log.info(
            "task %s: backfill of [%s, %s) reads the %d records of its filtered view",
            run.cfg.id,
            run.window.start,
            run.window.end,
            total,
        )
        return 0, total
    window, margin = run.window, run.cfg.batch_size
    width = run.cfg.source.concurrency
    rule = run.cfg.filter.rule
    lo = probe_offset(source, total, rule, window.start, width, margin)[0]  # within a batch, each end widened
    hi = probe_offset(source, total, rule, window.end, width, margin)[1]
    log.info(
        "task %s: backfill of [%s, %s) reads offsets [%d, %d) of %d (probed, +/- %d)",
        run.cfg.id,
        window.start,
        window.end,
        max(0, lo - margin),
        min(total, hi + margin),
        total,
        margin,
    )
    return max(0, lo - margin), min(total, hi + margin)
