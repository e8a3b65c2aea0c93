"""Pure filtering: parse a record's date and test it against the run's window.

The window is anchored on the run's reference time (data-interval end, or ``run_after`` for manual runs),
never on wall-clock time, so reruns and backfills of one run make the same decisions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
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
