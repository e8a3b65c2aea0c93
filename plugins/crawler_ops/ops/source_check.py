"""Pure: what ``crawler-ops check`` concludes from a source's answers (no I/O; :mod:`crawler_ops.ops.check` fetches).

From a decoded page body and a few dated records it tells where the records are (and where they may be when the
configured ``records_path`` holds none), how many carry the Kafka key and whether the keys are unique on the page,
which date formats each date field holds and how many dates fall in the window, whether dates grow with the offset
(the crawl's assumption: offset 0 is the oldest record, new ones are appended at the end), and what a first crawl
would cost at the configured rate. The findings are plain dicts with stable field names: the JSON of ``check
--json``, documented in ``docs/operators-guide.md``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from itertools import pairwise
from typing import Any

from crawler_ops.message.dates import date_format, parse_date
from crawler_ops.message.filtering import Verdict, Window
from crawler_ops.message.pages import path_steps
from crawler_ops.message.shaping import MessageShape, as_shape
from crawler_ops.planning import search_bracket

#: Suggested record paths shown at most.
MOST_SUGGESTIONS = 5
#: Unparseable date values quoted per field at most.
MOST_EXAMPLES = 3
#: How deep the search for lists of records goes into a body.
MOST_DEPTH = 6

YES, NO, UNKNOWN = "yes", "no", "unknown"
#: An estimate from a density is widened by this share each way: dates are only roughly in time order, and a page's
#: dates are few.
DENSITY_MARGIN = 0.1
#: What the order verdict answers.
ASSUMPTION = "dates grow with the offset: offset 0 is the oldest record, new records are appended at the end"


def records_at(document: Any, path: str) -> list[Any] | None:
    """The list at the dotted ``path`` of ``document`` (through objects only, as the crawl reads it), or None when a
    step is missing or the value there is not a list."""
    node = document
    for step in path_steps(path):
        if not isinstance(node, Mapping) or step not in node:
            return None
        node = node[step]
    return node if isinstance(node, list) else None


def record_lists(document: Any, depth: int = MOST_DEPTH) -> list[dict[str, Any]]:
    """The dotted paths of the lists of objects in ``document`` (each ``{"path", "records"}``), most records first,
    at most :data:`MOST_SUGGESTIONS`: where the records may be when ``records_path`` holds none. A body that is
    itself a list of objects is the path ``''``."""
    found: list[tuple[str, int]] = []
    if isinstance(document, list) and document and all(isinstance(item, Mapping) for item in document):
        found.append(("", len(document)))
    level: list[tuple[str, Any]] = [("", document)]
    for _ in range(depth):
        deeper = []
        for path, node in level:
            if not isinstance(node, Mapping):
                continue
            for name, value in node.items():
                where = f"{path}.{name}" if path else str(name)
                if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
                    found.append((where, len(value)))
                deeper.append((where, value))
        level = deeper
    found.sort(key=lambda item: (-item[1], item[0]))
    return [{"path": path, "records": size} for path, size in found[:MOST_SUGGESTIONS]]


def key_report(records: Sequence[Mapping[str, Any]], key: MessageShape | str | None) -> dict[str, Any]:
    """How many records have a key (``key``: the task's message shape or key field; a field's value other than null
    or ""), and whether their keys are unique on the page; without a key, keys are a hash of each record."""
    shape = as_shape(key)
    if shape.key is None:
        return {"field": None, "records": len(records), "present": None, "missing": 0, "unique": None, "repeated": []}
    names = shape.key.names
    rendered = (shape.key_of([r.get(name) for name in names]) for r in records)
    keys = [text for text in rendered if text is not None]
    repeated = sorted(key for key, n in Counter(keys).items() if n > 1)
    return {
        "field": shape.key_field or shape.key.text,
        "records": len(records),
        "present": len(keys),
        "missing": len(records) - len(keys),
        "unique": not repeated,
        "repeated": repeated[:MOST_EXAMPLES],
    }


def date_report(
    records: Sequence[Mapping[str, Any]], fields: Sequence[str], tz: tzinfo, window: Window
) -> dict[str, Any]:
    """Per date field, the formats its values are in (with counts) and the values no format reads; over the records,
    how many have a date (the first of ``fields`` present and parseable, as the filter takes it) and how many of
    those fall in ``window``, before it, or after it (no real date)."""
    per_field = []
    for name in fields:
        formats: Counter[str] = Counter()
        bad: list[str] = []
        present = 0
        for record in records:
            value = record.get(name)
            if value in (None, ""):
                continue
            present += 1
            found = date_format(value)
            if found is None:
                bad.append(str(value)[:40])
            else:
                formats[found] += 1
        per_field.append(
            {
                "field": name,
                "present": present,
                "parsed": sum(formats.values()),
                "formats": dict(formats.most_common()),
                "unparsed": len(bad),
                "unparsed_examples": bad[:MOST_EXAMPLES],
            }
        )
    dates = [record_moment(record, fields, tz) for record in records]
    verdicts = Counter(window.verdict(moment) for moment in dates if moment is not None)
    return {
        "fields": per_field,
        "records": len(records),
        "dated": sum(moment is not None for moment in dates),
        "undated": sum(moment is None for moment in dates),
        "in_window": verdicts[Verdict.KEEP],
        "older": verdicts[Verdict.EXPIRED],
        "after_window": verdicts[Verdict.BAD_DATE],
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
    }


def record_moment(record: Mapping[str, Any], fields: Sequence[str], tz: tzinfo) -> datetime | None:
    """A record's date as the filter takes it: the first of ``fields`` present and parseable."""
    for name in fields:
        if record.get(name) not in (None, ""):
            moment = parse_date(record[name], tz)
            if moment is not None:
                return moment
    return None


@dataclass(frozen=True)
class Dated:
    """A record's offset and its date."""

    offset: int
    moment: datetime

    def show(self) -> dict[str, Any]:
        return {"offset": self.offset, "date": self.moment.isoformat()}


def order_verdict(dated: Iterable[Dated]) -> dict[str, Any]:
    """Whether dates grow with the offset, as the crawl assumes (offset 0 the oldest record, new records appended at
    the end): ``yes`` when the highest offset is not older than the lowest and rising steps between neighbouring
    offsets are not outnumbered by falling ones; ``no`` otherwise; ``unknown`` without two different dates.
    Roughly in time order is enough: equal dates and a few steps back are allowed."""
    points = sorted(dated, key=lambda d: d.offset)
    rising = sum(b.moment > a.moment for a, b in pairwise(points))
    falling = sum(b.moment < a.moment for a, b in pairwise(points))
    evidence: dict[str, Any] = {"records": len(points), "rising_steps": rising, "falling_steps": falling}
    if points:
        evidence.update(lowest=points[0].show(), highest=points[-1].show())
    if rising + falling == 0:
        return {"verdict": UNKNOWN, "assumption": ASSUMPTION, "evidence": evidence}
    grows = points[-1].moment >= points[0].moment and rising >= falling
    return {"verdict": YES if grows else NO, "assumption": ASSUMPTION, "evidence": evidence}


def disorder(dated: Iterable[Dated]) -> int:
    """The largest distance in offsets between two records out of date order (a lower offset dated later); 0 when all
    are in order. For each record, the first one before it dated later is a running maximum: found by bisection."""
    tops: list[Dated] = []  # the records dated later than every one before them, in offset order
    widest = 0
    for point in sorted(dated, key=lambda d: d.offset):
        first = bisect_right(tops, point.moment, key=lambda d: d.moment)
        if first < len(tops):
            widest = max(widest, point.offset - tops[first].offset)
        if not tops or point.moment > tops[-1].moment:
            tops.append(point)
    return widest


def window_records(total: int, dated: Sequence[Dated], start: datetime) -> tuple[int, int] | None:
    """How many of the ``total`` records a first crawl's window (from ``start`` on) holds, judged from the dated
    records seen, dates growing with the offset: all when the record at offset 0 is in it; between the two
    neighbouring records seen on either side of ``start`` (exact when they are neighbours at the source); else a
    range from the densities seen (records per second between the farthest dated records, and across the page near
    the end), widened by :data:`DENSITY_MARGIN`, within those bounds. None without two different dates."""
    points = sorted(dated, key=lambda d: d.offset)
    if points and points[0].offset == 0 and points[0].moment >= start:
        return total, total
    low, high = 0, total
    for older, newer in pairwise(points):
        if older.moment < start <= newer.moment:
            low, high = total - newer.offset, total - older.offset - 1
    if points and points[-1].moment < start:
        high = total - points[-1].offset - 1
    if high - low <= 1:
        return low, high
    guesses = [guess for guess in densities(points, start) if guess is not None]
    if not guesses:
        return None if (low, high) == (0, total) else (low, high)
    least, most = math.floor(min(guesses) * (1 - DENSITY_MARGIN)), math.ceil(max(guesses) * (1 + DENSITY_MARGIN))
    return max(low, min(high, least)), max(low, min(high, most))


def densities(points: Sequence[Dated], start: datetime) -> list[int | None]:
    """Records from ``start`` to the newest dated record at two densities: between the farthest dated records, and
    between the newest and the oldest of those within a page of it."""
    if len(points) < 2:
        return []
    newest = points[-1]
    near = [p for p in points if newest.offset - p.offset < len(points)]
    pairs = [(points[0], newest), (near[0], newest)]
    found: list[int | None] = []
    for old, new in pairs:
        seconds = (new.moment - old.moment).total_seconds()
        if seconds <= 0 or new.offset <= old.offset:
            found.append(None)
            continue
        span = max(0.0, (newest.moment - start).total_seconds())
        found.append(math.ceil((new.offset - old.offset) / seconds * span))
    return found


def window_search(total: int, boundary: int, width: int, within: int) -> tuple[int, int, int]:
    """Requests, rounds and the offset found of a first crawl's search for the window's start at ``boundary`` (as
    :func:`crawler_ops.crawl.plan.probe_window_start` runs it: ``width`` one-record reads per round, to within
    ``within`` offsets, rounded down)."""
    requests = 0

    def older(points: list[int]) -> list[bool]:
        nonlocal requests
        requests += len(points)
        return [p < boundary for p in points]

    lo, _, rounds = search_bracket(total, width, within, older)
    return requests, rounds, lo


def batches_between(floor: int, total: int, batch_size: int, aligned: bool) -> int:
    """The batches of a plan of ``[floor, total)`` (newest first, cut at multiples of ``batch_size`` when
    ``aligned``; see :func:`crawler_ops.planning.iter_plan`)."""
    if total <= floor:
        return 0
    if aligned:
        return (total - 1) // batch_size - floor // batch_size + 1
    return math.ceil((total - floor) / batch_size)


@dataclass(frozen=True)
class Rate:
    """What paces a crawl of the source: the task's batch size and paging, its rate and parallelism, the first
    crawl's early stop, and one page request's latency as the check measured it."""

    batch_size: int
    aligned: bool
    concurrency: int
    max_in_flight: int | None
    requests_per_s: float | None
    max_expired_batches: int
    latency_s: float
    total_requests: int

    def seconds(self, search_rounds: int, search: int, pages: int) -> float:
        """The time of a first crawl's requests: the search rounds one after the other, the pages ``parallel`` at a
        time, and never faster than the rate allows."""
        parallel = max(1, min(self.concurrency, self.max_in_flight or self.concurrency))
        by_latency = (search_rounds + math.ceil(pages / parallel) + self.total_requests) * self.latency_s
        by_rate = (self.total_requests + search + pages) / self.requests_per_s if self.requests_per_s else 0.0
        return max(by_latency, by_rate)


def first_crawl_estimate(
    total: int, in_window: tuple[int, int] | None, rate: Rate, basis: str = "dates seen", counted: bool = False
) -> dict[str, Any]:
    """Requests and seconds a first crawl would take: the total, the search for the window's start, and the pages
    from ``max_expired_batches`` batches below it to the end; a range when the window's records are estimated
    (``in_window`` None: unknown, from none of them to all; ``basis`` says why). ``counted``: the source counted the
    window (``source.window_filter``), so its start is found by that one count instead of a search."""
    low, high = in_window if in_window is not None else (0, total)
    cases = []
    for records in (low, high):
        boundary = max(0, total - records)
        if counted:
            search, rounds, start = 1, 1, boundary
        else:
            search, rounds, start = window_search(total, boundary, rate.concurrency, rate.batch_size)
        floor = max(0, start - rate.max_expired_batches * rate.batch_size)
        pages = batches_between(floor, total, rate.batch_size, rate.aligned)
        requests = rate.total_requests + search + pages
        cases.append((records, requests, rate.seconds(rounds, search, pages)))
    (records_lo, requests_lo, seconds_lo), (records_hi, requests_hi, seconds_hi) = cases
    return {
        "records_in_window": [records_lo, records_hi],
        "requests": [min(requests_lo, requests_hi), max(requests_lo, requests_hi)],
        "seconds": [round(min(seconds_lo, seconds_hi), 1), round(max(seconds_lo, seconds_hi), 1)],
        "exact": in_window is not None and low == high,
        "basis": basis if in_window is not None else f"unknown window ({basis}): from none to every record",
        "rate": {
            "requests_per_s": rate.requests_per_s,
            "parallel": min(rate.concurrency, rate.max_in_flight or rate.concurrency),
            "batch_size": rate.batch_size,
            "page_latency_s": round(rate.latency_s, 3),
        },
    }


def problems(report: Mapping[str, Any]) -> list[str]:
    """The problems in the data a report shows, the one to fix first first; none: the source suits the task."""
    found: list[str] = []
    page, keys, dates, order = (report.get(part) or {} for part in ("page", "keys", "dates", "order"))
    if page.get("records") is None or (page["records"] == 0 and (report["total"]["value"] or 0) > 0):
        what = "no list" if page.get("records") is None else "an empty list"
        hint = ", ".join(f"'{s['path']}' ({s['records']} records)" for s in page.get("suggested_paths") or [])
        found.append(
            f"the page has {what} at records_path '{page.get('records_path')}'"
            + (f"; lists of objects in the body: {hint}" if hint else "; the body holds no list of objects")
        )
        return found
    if keys.get("missing"):
        found.append(
            f"{keys['missing']} of {keys['records']} records have no kafka.key_field '{keys['field']}' (their key "
            "would be a hash of the whole record: a changed record would be a new message)"
        )
    if keys.get("unique") is False:
        found.append(f"keys repeat on one page ({', '.join(keys['repeated'])}): kafka.key_field is not an id")
    if dates.get("records") and not dates.get("dated"):
        fields = ", ".join(f["field"] for f in dates["fields"])
        found.append(
            f"no record has a date the filter reads in filter.date_fields ({fields}): all would be dead-lettered"
        )
    elif dates.get("undated"):
        found.append(
            f"{dates['undated']} of {dates['records']} records have no readable date (they would be dead-lettered)"
        )
    if dates.get("after_window"):
        found.append(
            f"{dates['after_window']} records are dated after the window's end (the clock plus "
            "filter.future_tolerance_hours): check filter.timezone"
        )
    registry = report.get("registry") or {}
    if "error" in registry:
        found.append(f"the value schema cannot be checked: {registry['error']}")
    elif registry.get("misfits") and registry["contract"] == "freeze":
        found.append(
            f"{registry['misfits']} of {registry['records']} records do not fit the value schema of "
            f"{registry['subject']} ({registry['why']}): the next plan fails; register a version that accepts them, "
            "or set kafka.contract"
        )
    if order.get("verdict") == NO:
        found.append(
            order.get("problem")
            or "dates do not grow with the offset: the crawl assumes offset 0 is the oldest record and new records "
            "are appended at the end; its first crawl would stop early and skip records"
        )
    return found


def exit_code(report: Mapping[str, Any]) -> int:
    """0 when the source suits the task, 1 when the data has a problem (:func:`problems`)."""
    return 1 if problems(report) else 0
