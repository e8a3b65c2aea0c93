"""Pure date parsing: the date formats real sources send, read as aware datetimes.

Accepted (a naive value is a wall time in the task's ``filter.timezone``):

- ISO 8601 text, ``-`` or ``/`` between the date parts, with ``T`` or a space, fractional seconds, ``Z`` or an
  offset: ``2026-11-20``, ``2026/11/20 10:11:12``, ``2026-11-20T10:11:12.250Z``, ``2026-11-20T10:11:12+08:00``;
- compact dates of digits only: ``20261120`` (8 digits) and ``20261120101112`` (14);
- other digits, with or without a fraction, as epoch seconds, or milliseconds from 10^11 on: ``1795140672``,
  ``"1795140672123"``, ``1795140672.5``, as numbers or as text (8 and 14 digits being dates, epoch seconds of
  1970-1973 and milliseconds after 2286 cannot be written as text);
- dotted or single-digit dates: ``2026.11.20``, ``2026.1.5 10:11``, ``2026-1-5``;
- Chinese dates: ``2026年11月20日``, ``2026年11月20日 10:11:12``, ``2026年11月20日10时11分12秒``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo

# Numbers above this are epoch milliseconds, below it epoch seconds (year 5138 in seconds).
EPOCH_MS_THRESHOLD = 100_000_000_000
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
# Digit-only lengths that are compact calendar dates rather than epoch numbers.
# (12 digits stay epoch milliseconds: those of 1973-2001 have 12.)
_COMPACT = {8: "%Y%m%d", 14: "%Y%m%d%H%M%S"}
_TIME = r"(?:[ T]*(?:(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?|(\d{1,2})[时点](\d{1,2})分(?:(\d{1,2})秒)?))?"
_LOOSE = re.compile(r"(\d{4})([./-])(\d{1,2})\2(\d{1,2})" + _TIME)
_CHINESE = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日" + _TIME)


def parse_date(value: object, tz: tzinfo) -> datetime | None:
    """An aware datetime from one of the formats of this module, or None when ``value`` is none of them."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return from_epoch(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    moment = from_digits(text) if _DIGITS.fullmatch(text) else from_iso(text) or from_pattern(text)
    if moment is None:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=tz)


def from_epoch(value: float) -> datetime | None:
    try:
        return datetime.fromtimestamp(value / 1000 if abs(value) >= EPOCH_MS_THRESHOLD else value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def from_digits(text: str) -> datetime | None:
    """A compact date (8 or 14 digits), else an epoch number. Read before ISO: Python reads some digit
    strings as ISO dates with a digit as the date-time separator (``1701011200000`` as 1701-01-12)."""
    layout = None if "." in text else _COMPACT.get(len(text))
    if layout is None:
        return from_epoch(float(text) if "." in text else int(text)) if len(text) <= 30 else None
    try:
        return datetime.strptime(text, layout)
    except ValueError:
        return None


def from_iso(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("/", "-"))
    except ValueError:
        return None


def from_pattern(text: str) -> datetime | None:
    """Dotted, single-digit and Chinese dates, with an optional time, as naive datetimes."""
    match = _CHINESE.fullmatch(text)
    if match is not None:
        year, month, day, *clock = match.groups()
    else:
        match = _LOOSE.fullmatch(text)
        if match is None:
            return None
        year, _, month, day, *clock = match.groups()
    hour, minute, second, fraction = clock[0:4] if clock[0] is not None else (*clock[4:7], None)
    try:
        return datetime(
            int(year),
            int(month),
            int(day),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((fraction or "0").ljust(6, "0")),
        )
    except ValueError:
        return None


def date_format(value: object) -> str | None:
    """The name of the format of :mod:`crawler_ops.message.dates` that reads ``value``, or None when none does."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        kind = "epoch milliseconds" if abs(value) >= EPOCH_MS_THRESHOLD else "epoch seconds"
        return f"{kind} (number)" if parse_date(value, UTC) is not None else None
    if not isinstance(value, str) or parse_date(value, UTC) is None:
        return None
    text = value.strip()
    if _DIGITS.fullmatch(text):
        if "." not in text and len(text) in _COMPACT:
            return "compact date (YYYYMMDD)" if len(text) == 8 else "compact date-time (YYYYMMDDhhmmss)"
        return "epoch milliseconds (text)" if float(text) >= EPOCH_MS_THRESHOLD else "epoch seconds (text)"
    iso = from_iso(text)
    if iso is not None:
        zone = "with offset" if iso.tzinfo is not None else "local time"
        return f"ISO 8601 date, {zone}" if len(text) <= 10 else f"ISO 8601 date-time, {zone}"
    return "Chinese date" if "年" in text else "dotted or single-digit date" if from_pattern(text) else None
