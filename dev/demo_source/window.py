"""Date-window filters of the demo source.

``from`` and ``to`` query parameters on a page route (``/list``, ``/pages``, ``/search``) or on ``/count`` restrict
the task to its records whose true date lies in ``[from, to)``: the filtered view, in offset order and numbered from
0, so ``/list?offset=0&limit=100&from=..&to=..`` is the view's first 100 records and ``/count?from=..&to=..`` its size.
Times are ISO 8601; without an offset they are Asia/Shanghai wall times, as the records' own dates.

Per task, in the body of ``PUT /admin/tasks/{task}``: ``"window": {"drop_every": 0, "count_short": 0}``, two faults
of a source whose filter loses rows: with ``drop_every: n`` the view's pages silently leave out every n-th record of
the view (offsets ``n - 1, 2n - 1, ...``) while its count stays true; with ``count_short: n`` the view's count is
``n`` less than the records its pages hold.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Annotated

import msgspec

from demo_source.data import JITTER_S, LOCAL_OFFSET_S, TaskConfig, _id_hash, _true_epoch

_LOCAL = timezone(timedelta(seconds=LOCAL_OFFSET_S))
#: A task's filtered views kept (each a list of offsets).
_VIEWS_KEPT = 8


class WindowOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A task's window-filter options (see the module doc)."""

    drop_every: Annotated[int, msgspec.Meta(ge=0)] = 0
    count_short: Annotated[int, msgspec.Meta(ge=0)] = 0


def view_count(view: list[int], options: WindowOptions) -> int:
    """What the count of a filtered view answers (less than its records under ``count_short``)."""
    return max(0, len(view) - options.count_short)


def window_of(query: dict[str, str]) -> tuple[int, int] | None:
    """The ``[from, to)`` of a request as epoch seconds (rounded up: dates are whole seconds), None without one.

    :raises ValueError: a bound missing or not a time.
    """
    if "from" not in query and "to" not in query:
        return None
    if "from" not in query or "to" not in query:
        raise ValueError("give both from and to")
    return _epoch(query["from"]), _epoch(query["to"])


def _epoch(text: str) -> int:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_LOCAL)
    seconds = moment.timestamp()
    return int(seconds) + (seconds > int(seconds))


def view_offsets(cfg: TaskConfig, total: int, start: int, end: int) -> list[int]:
    """The offsets of the records whose true date lies in ``[start, end)`` (epoch seconds), in order.

    A record's date is its slot plus a jitter of at most ``JITTER_S``, and slots never go down with the offset: a
    bisection for ``start - 2 JITTER_S`` (``end + 2 JITTER_S``) leaves every record below (above) it before
    ``start`` (at or after ``end``), so only the offsets between are tested.
    """
    date: Callable[[int], int] = lambda offset: _true_epoch(cfg, offset, _id_hash(cfg, offset))  # noqa: E731
    lo = _first_at(date, total, start - 2 * JITTER_S)
    hi = _first_at(date, total, end + 2 * JITTER_S)
    return [offset for offset in range(lo, hi) if start <= date(offset) < end]


def _first_at(date: Callable[[int], int], total: int, moment: int) -> int:
    """An offset whose predecessor is dated before ``moment`` and which is dated at or after it (or ``total``)."""
    return bisect_left(range(total), moment, key=date)


class Views:
    """A task's filtered views, kept while its data set (generation and total) is unchanged."""

    def __init__(self) -> None:
        self.kept: dict[tuple[int, int, int, int], list[int]] = {}

    def offsets(self, cfg: TaskConfig, generation: int, total: int, window: tuple[int, int]) -> list[int]:
        key = (generation, total, *window)
        view = self.kept.get(key)
        if view is None:
            if len(self.kept) >= _VIEWS_KEPT:
                self.kept.pop(next(iter(self.kept)))
            view = self.kept[key] = view_offsets(cfg, total, *window)
        return view


def page_offsets(view: list[int], offset: int, limit: int, options: WindowOptions) -> list[int]:
    """The unfiltered offsets of the view's records ``[offset, offset + limit)``, less those the fault drops."""
    wanted = range(offset, min(offset + limit, len(view)))
    every = options.drop_every
    return [view[i] for i in wanted if not every or (i + 1) % every]
