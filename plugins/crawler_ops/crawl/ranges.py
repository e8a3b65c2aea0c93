"""Which offsets a run reads when they are not simply those above the watermark: a replay's (named), a backfill's
(found by probing the source for its interval's dates), a first crawl's window start (probed the same way); and
the newest part of a plan, within ``max_batches`` and ``max_planned_batches``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import islice

from crawler_ops.crawl.run import RunContext
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.message.filtering import DateRule, record_date
from crawler_ops.message.pages import record_head
from crawler_ops.planning import Batch, iter_gaps, search_bracket

log = logging.getLogger(__name__)


def range_batches(run: RunContext, source: SourceApiHook, total: int) -> list[Batch]:
    """The batches of a replay's or a backfill's range, newest first."""
    lo, hi = range_to_read(run, source, total)
    return take_batches(run, iter_gaps(lo, hi, run.cfg.batch_size, aligned=run.cfg.source.paginator.aligned), total, lo)


def range_to_read(run: RunContext, source: SourceApiHook, total: int) -> tuple[int, int]:
    """The offsets a replay names, a backfill's filtered view (``source.window_filter``: all of it), or those a
    backfill finds by probing its interval's two ends (:func:`probed_range`)."""
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
    cfg, window = run.cfg, run.window
    margin = cfg.backfill_margin_batches * cfg.batch_size
    interval, width = (window.start, window.end), cfg.source.concurrency
    lo, hi = probed_range(source, total, cfg.filter.rule, interval, width=width, within=cfg.batch_size, margin=margin)
    log.info(
        "task %s: backfill of [%s, %s) reads offsets [%d, %d) of %d (probed, +/- %d)",
        cfg.id,
        window.start,
        window.end,
        lo,
        hi,
        total,
        margin,
    )
    return lo, hi


def probed_range(
    source: SourceApiHook,
    total: int,
    rule: DateRule,
    interval: tuple[datetime, datetime],
    *,
    width: int,
    within: int,
    margin: int,
) -> tuple[int, int]:
    """The offsets ``[lo, hi)`` holding the records dated in ``interval``, found by probing for its two ends
    (``width`` reads a round), each to within ``within`` offsets, then widened by ``margin`` outwards.

    The bound: a probe leaves a record found older than the moment just below its bracket and one found not older at
    its top. When any two records more than ``D`` offsets apart are in date order, every record more than ``D``
    below the first is older and every record more than ``D`` above the second is not: with ``D < margin`` the range
    holds every record of the interval, however the probe's reads fell."""
    lo = probe_offset(source, total, rule, interval[0], width, within)[0]
    hi = probe_offset(source, total, rule, interval[1], width, within)[1]
    return max(0, lo - margin), min(total, hi + margin)


def probe_window_start(source: SourceApiHook, total: int, run: RunContext) -> int:
    """Where a first crawl's window starts: offsets below are older than the window. Searched to within a batch
    and rounded down, so the crawl reads at most one batch more than the exact start would (filtered out as
    expired), for half the rounds of a search down to the record at 1,000 records a batch."""
    cfg = run.cfg
    lo, hi = probe_offset(source, total, cfg.filter.rule, run.window.start, cfg.source.concurrency, cfg.batch_size)
    log.info("task %s: probed the window start in offsets [%d, %d] of %d; it is taken at %d", cfg.id, lo, hi, total, lo)
    return lo


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
