"""The order a demo data set serves its records in.

Per task, in the body of ``PUT /admin/tasks/{task}``: ``"order": "oldest_first"`` (the default, what the crawl
assumes: offset 0 is the oldest record and new records are appended at the end) or ``"newest_first"`` (offset 0 is
the newest record, as many feeds list theirs: every append shifts the older records to higher offsets). Only the
order changes; the records, their dates and the count are the same.
"""

from __future__ import annotations

from typing import Any, Literal

from demo_source.data import Faults, TaskConfig, make_page, make_record

Order = Literal["oldest_first", "newest_first"]
OLDEST_FIRST: Order = "oldest_first"


def served_records(
    cfg: TaskConfig, start: int, end: int, total: int, order: Order, faults: Faults | None = None
) -> list[dict[str, Any]]:
    """The records served at offsets ``start .. end - 1`` of a data set of ``total`` records in ``order``."""
    if order == OLDEST_FIRST:
        return make_page(cfg, start, end, faults)
    return [make_record(cfg, total - 1 - offset, faults) for offset in range(start, end)]
