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


def counted_window_start(run: RunContext, total: int) -> int:
    """A first crawl's window start among the unfiltered offsets ``[0, total)``: ``total`` minus the source's count
    of the window, taken after ``total`` (module doc)."""
    view = run.source(filtered=True)
    try:
        count = view.get_total()
    finally:
        view.close()
    start = max(0, total - count)
    log.info(
        "task %s: the source counts %d records in the window [%s, %s]; the window starts at offset %d of %d",
        run.cfg.id,
        count,
        run.window.start.isoformat(),
        run.window.end.isoformat(),
        start,
        total,
    )
    return start


def view_shortfall(run: RunContext, record: RunRecord | None) -> str | None:
    """Why a backfill that read its window's filtered view did not receive what the source counted: fewer records
    than the count (its ``total``), or records dated outside the window; None when it did (or read no view)."""
    if not run.reads_filtered_view or record is None or record.total is None:
        return None
    counts, window = record.counts, run.window
    if counts.fetched >= record.total and not counts.expired:
        return None
    outside = f", {counts.expired} of them dated outside it" if counts.expired else ""
    return (
        f"task {run.cfg.id}: window filter: the source counted {record.total} records dated in "
        f"[{window.start.isoformat()}, {window.end.isoformat()}) and the run received {counts.fetched}{outside}: the "
        "source's filter drops or misplaces records; the backfill failed"
    )
