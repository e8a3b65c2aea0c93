"""Pure filtering: parse a record's date and test it against the run's window.

The window is anchored on the run's reference time (data-interval end, or ``run_after`` for manual runs),
never on wall-clock time, so reruns and backfills of one run make the same decisions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from crawler_ops.message.dates import parse_date

__all__ = ["DateRule", "Verdict", "Window", "WindowTest", "classify", "parse_date", "record_date"]


class Verdict(enum.Enum):
    KEEP = "keep"
    EXPIRED = "expired"
    BAD_DATE = "bad_date"


@dataclass(frozen=True)
class Window:
    """Which record dates a run keeps.

    A closed window ``[start, end]`` belongs to a run that moves the watermark (or replays offsets): its start is
    ``ref - days`` and its end the wall clock plus the future tolerance, so a record is never expired for being
    newer than the run's reference time; a date after the end is no real date and is dead-lettered.
    A half-open window ``[start, end)`` is a backfill run's data interval: a date exactly at ``end`` belongs to
    the next interval, and every date outside is simply not this run's.
    """

    start: datetime
    end: datetime
    half_open: bool = False

    @classmethod
    def since(cls, ref: datetime, days: float, now: datetime, tolerance: timedelta = timedelta(0)) -> Window:
        """The window of a run that moves the watermark: from ``ref - days`` on, up to ``now`` (the wall clock) plus
        ``tolerance``. A reference time ahead of the wall clock counts as the clock, so its own records are kept."""
        if ref.tzinfo is None or now.tzinfo is None:
            raise ValueError("the reference time and the wall clock must be timezone-aware")
        return cls(ref - timedelta(days=days), max(ref, now) + tolerance)

    @classmethod
    def interval(cls, start: datetime, end: datetime) -> Window:
        """A backfill run's data interval ``[start, end)``."""
        if start.tzinfo is None or end.tzinfo is None:
            raise ValueError("a data interval must be timezone-aware")
        return cls(start, end, half_open=True)

    def in_zone(self, tz: tzinfo) -> Window:
        """The same window expressed in ``tz``: comparing datetimes that share a tzinfo is much cheaper."""
        return Window(self.start.astimezone(tz), self.end.astimezone(tz), self.half_open)

    def verdict(self, moment: datetime) -> Verdict:
        """KEEP inside; EXPIRED before the start (or anywhere outside a half-open window); BAD_DATE after the end
        of a closed window."""
        if moment < self.start:
            return Verdict.EXPIRED
        if moment < self.end or (moment == self.end and not self.half_open):
            return Verdict.KEEP
        return Verdict.EXPIRED if self.half_open else Verdict.BAD_DATE


@dataclass(frozen=True)
class DateRule:
    """Which fields carry a record's date, in order of preference, and the timezone of naive values."""

    fields: tuple[str, ...] = ("aae397", "Collect_time")
    timezone: str = "Asia/Shanghai"

    @property
    def tz(self) -> tzinfo:
        return ZoneInfo(self.timezone)


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
    verdict = window.verdict(moment)
    if verdict is Verdict.BAD_DATE:
        return verdict, (
            f"{detail}={str(record[detail])[:40]!r} is after {window.end.isoformat()}, the wall clock plus "
            "filter.future_tolerance_hours: not a real date"
        )
    return verdict, detail


class WindowTest:
    """:func:`classify` for the many records of one page, from their date values alone.

    The common record, whose first date field is ISO text (``YYYY-MM-DD...`` or ``YYYY/MM/DD...``) inside the
    window, costs one parse and two comparisons: a naive date is compared with the window's bounds as wall times
    in ``tz`` when the window is expressed in that very zone object, which is how Python compares two datetimes
    sharing a tzinfo anyway. Every other record, and every date after the window's end, goes through
    :func:`classify`, so the decisions and reasons are the same.

    :param rule: the date fields, in order of preference.
    :param window: the run's window.
    :param tz: the zone of naive dates.
    """

    def __init__(self, rule: DateRule, window: Window, tz: tzinfo) -> None:
        self.rule, self.window, self.tz = rule, window, tz
        same_zone = window.start.tzinfo is tz and window.end.tzinfo is tz
        self.wall = (window.start.replace(tzinfo=None), window.end.replace(tzinfo=None)) if same_zone else None

    def verdicts(
        self, rows: Iterable[Sequence[object]], moments: list[datetime | None] | None = None
    ) -> list[tuple[Verdict, str]]:
        """The verdict and detail (the field used, or why the date is bad) of each record, from its date
        values in ``rule.fields`` order (None when absent; values after those are ignored). ``moments``, when given,
        gets each record's date (naive: a wall time in ``tz``), None when it has none."""
        keep, expired = (Verdict.KEEP, self.rule.fields[0]), (Verdict.EXPIRED, self.rule.fields[0])
        aware, wall = (self.window.start, self.window.end), self.wall
        closed = not self.window.half_open
        parse, tz, out = datetime.fromisoformat, self.tz, []
        note = moments.append if moments is not None else None
        for values in rows:
            value, moment = values[0], None
            if value.__class__ is str and value[4:5] == "-":  # type: ignore[index]
                try:  # ISO text as sources send it, tried as it is first: most dates are
                    moment = parse(value)  # type: ignore[arg-type]
                except ValueError:  # not as it is (padded, slashed): normalised below
                    moment = None
            if moment is None:
                text = value.strip().replace("/", "-") if value.__class__ is str else ""  # type: ignore[attr-defined]
                if text[4:5] != "-":  # not ISO with separators: digits read as ISO may be epoch numbers
                    out.append(self.slow(values, note))
                    continue
                try:
                    moment = parse(text)
                except ValueError:
                    out.append(self.slow(values, note))
                    continue
            if note is not None:
                note(moment)
            if moment.tzinfo is None and wall is not None:
                start, end = wall
            else:
                start, end = aware
                if moment.tzinfo is None:
                    moment = moment.replace(tzinfo=tz)
            if moment < start:
                out.append(expired)
            elif moment < end or (closed and moment == end):
                out.append(keep)
            else:  # after a closed window's end: the garbage reason comes from classify
                out.append(self.slow(values) if closed else expired)
        return out

    def slow(
        self, values: Sequence[object], note: Callable[[datetime | None], None] | None = None
    ) -> tuple[Verdict, str]:
        """:func:`classify` of one record; ``note`` gets its date."""
        record = dict(zip(self.rule.fields, values, strict=False))
        if note is not None:
            note(record_date(record, self.rule.fields, self.tz)[0])
        return classify(record, self.rule, self.window, self.tz)
