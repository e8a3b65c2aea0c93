"""What a run does with ``source.window_filter``: a first crawl counts the window instead of searching for it, and a
backfill that read the window's filtered view checks that it received what the source counted.

The race with appends, for a first crawl: the plan counts the unfiltered total ``T`` first, then the window ``C``.
Records are appended at the end with current dates, so records appended between the two counts are inside the
window and counted in ``C``: ``T - C`` is at most the true number of records below the window, never above. The
window start is put at ``T - C`` and the plan reads the unfiltered offsets ``[T - C, T)`` (minus the usual margin of
``max_expired_batches`` batches), by the same batches, status rows and watermark as every run: older records read
by that slack are filtered out as expired, records at offsets ``>= T`` are the next run's. Nothing below ``T`` is
lost to the race, nothing is read twice.
"""

from __future__ import annotations

import logging

from crawler_ops.crawl.run import RunContext
from crawler_ops.results import RunRecord

log = logging.getLogger(__name__)


def counted_window_start(run: RunContext, total: int) -> tuple[int, int]:
    """A first crawl's window start among the unfiltered offsets ``[0, total)`` (``total`` minus the source's count
    of the window, taken after ``total``: module doc), and that count."""
    view = run.source(filtered=True)
    try:
        count = view.get_total()
    finally:
        view.close()
    start = window_start(total, count)
    log.info(
        "task %s: the source counts %d records in the window [%s, %s]; the window starts at offset %d of %d",
        run.cfg.id,
        count,
        run.window.start.isoformat(),
        run.window.end.isoformat(),
        start,
        total,
    )
    return start, count


def window_start(total: int, count: int) -> int:
    """The first offset of a window the source counts ``count`` records in, ``total`` being counted before: records
    appended between the two counts are in the window (they are new), so this is never above the true start."""
    return max(0, total - count)


def window_failure(run: RunContext, record: RunRecord | None, complete: bool) -> str | None:
    """Why a run's records disagree with the count the source reported for its window (:func:`view_shortfall`,
    :func:`counted_excess`); None when they agree, or the run counted no window. ``complete``: every chunk of the
    run finished."""
    return view_shortfall(run, record, complete) or counted_excess(run, record)


def counted_excess(run: RunContext, record: RunRecord | None) -> str | None:
    """A first crawl that counted its window keeps at most that count: every record it keeps is in the window and
    was in the source when the count was taken. Keeping more means the source's count leaves out records its pages
    hold, so the window start taken from it is too high and records just below it may be lost."""
    if record is None or record.window_count is None or record.counts.kept <= record.window_count:
        return None
    return (
        f"task {run.cfg.id}: window filter: the source counted {record.window_count} records dated from "
        f"{run.window.start.isoformat()} on, and the first crawl kept {record.counts.kept} of offsets below "
        f"{record.total}: its count leaves out records, so the window start counted from it is too high; the first "
        "crawl failed and set no watermark (its batch rows are forgotten): fix the source's filter, or remove "
        "source.window_filter, and run again"
    )


def view_shortfall(run: RunContext, record: RunRecord | None, complete: bool) -> str | None:
    """Why a backfill that read its window's filtered view did not receive what the source counted: fewer records
    than the count (its ``total``), or records dated outside the window; None when it did (or read no view). When
    chunks failed (not ``complete``), their errors say why, and this only says how much was received."""
    if not run.reads_filtered_view or record is None or record.total is None:
        return None
    counts, window = record.counts, run.window
    if counts.fetched >= record.total and not counts.expired:
        return None
    outside = f", {counts.expired} of them dated outside it" if counts.expired else ""
    return (
        f"task {run.cfg.id}: window filter: the source counted {record.total} records dated in "
        f"[{window.start.isoformat()}, {window.end.isoformat()}) and the run received {counts.fetched}{outside}"
        + (
            ": the source's filter drops or misplaces records; the backfill failed"
            if complete or counts.expired
            else " (chunks failed: see their errors)"
        )
    )
