"""Pure filtering: parse a record's date and test it against the run's window.

The window is anchored on the run's reference time (data-interval end, or ``run_after`` for manual runs),
never on wall-clock time, so reruns and backfills of one run make the same decisions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

# Numbers above this are epoch milliseconds, below it epoch seconds (year 5138 in seconds).
_EPOCH_MS_THRESHOLD = 100_000_000_000


class Verdict(enum.Enum):
    KEEP = "keep"
    EXPIRED = "expired"
    BAD_DATE = "bad_date"


@dataclass(frozen=True)
class Window:
    """The closed interval ``[start, end]`` of aware datetimes a kept record's date must lie in."""

    start: datetime
    end: datetime

    @classmethod
    def around(cls, ref: datetime, days: float, tolerance: timedelta = timedelta(0)) -> Window:
        if ref.tzinfo is None:
            raise ValueError("the reference time must be timezone-aware")
        return cls(ref - timedelta(days=days), ref + tolerance)

    def in_zone(self, tz: tzinfo) -> Window:
        """The same window expressed in ``tz``: comparing datetimes that share a tzinfo is much cheaper."""
        return Window(self.start.astimezone(tz), self.end.astimezone(tz))

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment <= self.end


@dataclass(frozen=True)
class DateRule:
    """Which fields carry a record's date, in order of preference, and the timezone of naive values."""

    fields: tuple[str, ...] = ("aae397", "Collect_time")
    timezone: str = "Asia/Shanghai"

    @property
    def tz(self) -> tzinfo:
        return ZoneInfo(self.timezone)


def parse_date(value: object, tz: tzinfo) -> datetime | None:
    """An aware datetime from an ISO-8601 string (naive values in ``tz``) or an epoch number; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        seconds = value / 1000 if abs(value) >= _EPOCH_MS_THRESHOLD else value
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    text = value.strip().replace("/", "-")
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=tz)


def record_date(record: Mapping[str, object], fields: Sequence[str], tz: tzinfo) -> tuple[datetime | None, str]:
    """The first present, parseable date among ``fields`` and the field it came from.

    When none parses, returns ``(None, reason)`` with a reason naming each field and its value.
    """
    problems: list[str] = []
    for field in fields:
        if field not in record or record[field] in (None, ""):
            problems.append(f"{field} missing")
            continue
        moment = parse_date(record[field], tz)
        if moment is not None:
            return moment, field
        problems.append(f"{field}={str(record[field])[:40]!r} unparseable")
    return None, "no usable date: " + ", ".join(problems)


def classify(record: Mapping[str, object], rule: DateRule, window: Window, tz: tzinfo) -> tuple[Verdict, str]:
    """KEEP, EXPIRED or BAD_DATE for one record, with the field used or the reason it is bad."""
    moment, detail = record_date(record, rule.fields, tz)
    if moment is None:
        return Verdict.BAD_DATE, detail
    return (Verdict.KEEP if window.contains(moment) else Verdict.EXPIRED), detail


class WindowTest:
    """:func:`classify` for the many records of one page, from their date values alone.

    The common record, whose first date field is ISO text, costs one parse and two comparisons: a naive
    date is compared with the window's bounds as wall times in ``tz`` when the window is expressed in that
    very zone object, which is how Python compares two datetimes sharing a tzinfo anyway. Every other
    record goes through :func:`classify`, so the decisions are the same.

    :param rule: the date fields, in order of preference.
    :param window: the run's window.
    :param tz: the zone of naive dates.
    """

    def __init__(self, rule: DateRule, window: Window, tz: tzinfo) -> None:
        self.rule, self.window, self.tz = rule, window, tz
        same_zone = window.start.tzinfo is tz and window.end.tzinfo is tz
        self.wall = (window.start.replace(tzinfo=None), window.end.replace(tzinfo=None)) if same_zone else None

    def verdicts(self, rows: Iterable[Sequence[object]]) -> list[tuple[Verdict, str]]:
        """The verdict and detail (the field used, or why the date is bad) of each record, from its date
        values in ``rule.fields`` order (None when absent; values after those are ignored)."""
        keep, expired = (Verdict.KEEP, self.rule.fields[0]), (Verdict.EXPIRED, self.rule.fields[0])
        start, end = self.wall or (self.window.start, self.window.end)
        parse, tz, out = datetime.fromisoformat, self.tz, []
        for values in rows:
            value = values[0]
            if value.__class__ is str:
                try:
                    moment = parse(value.strip().replace("/", "-"))  # type: ignore[attr-defined]
                except ValueError:
                    out.append(self.slow(values))
                    continue
                if moment.tzinfo is None and self.wall is not None:
                    out.append(keep if start <= moment <= end else expired)
                    continue
                if moment.tzinfo is None:
                    moment = moment.replace(tzinfo=tz)
                out.append(keep if self.window.contains(moment) else expired)
            else:
                out.append(self.slow(values))
        return out

    def slow(self, values: Sequence[object]) -> tuple[Verdict, str]:
        return classify(dict(zip(self.rule.fields, values, strict=False)), self.rule, self.window, self.tz)
