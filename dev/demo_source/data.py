"""Pure, deterministic data model of the demo job postings source.

Nothing here performs I/O. A data set is a pure function of a
:class:`TaskConfig` and a record offset, so any record can be generated on
demand and the ground truth of a date window can be computed exactly.

Date layout (``n_in = round(in_window_share * total0)``):

* offsets ``0 .. total0 - n_in - 1`` (old records) lie in
  ``[ref - history_days, ref - window_days - 61 s]``;
* offsets ``total0 - n_in .. total0 - 1`` (in-window records) lie in
  ``[ref - window_days + 61 s, ref - 61 s]``;
* offsets ``>= total0`` (appended records) lie at
  ``ref + (offset - total0 + 1) * append_step_s``.

Within the first two groups records are spread evenly in offset order plus a
deterministic jitter of up to :data:`JITTER_S` seconds, clamped to the group's
bounds, so ordering is only roughly by time while the group bounds are exact.
All true dates have second precision.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property
from typing import Annotated, Any, Final

import msgspec

from demo_source.pools import (
    CITIES,
    CITY_CODES,
    COMPANIES,
    DESCRIPTIONS,
    EDUCATION,
    SALARIES,
    TITLES,
)

MASK64: Final[int] = (1 << 64) - 1
DAY_S: Final[int] = 86_400
#: Largest deterministic jitter (either direction) of an initial record's date.
JITTER_S: Final[int] = 180
#: Distance kept between a group of initial records and its window edge.
EDGE_S: Final[int] = 61
#: Offset of the source's local time (Asia/Shanghai, no DST) from UTC.
LOCAL_OFFSET_S: Final[int] = 8 * 3600
#: ``aae397`` value of records hit by the ``bad_date_share`` fault.
BAD_DATE: Final[str] = "not-a-date"

_LOCAL_SUFFIX: Final[str] = "+08:00"
_NORMAL: Final[int] = 0
_BAD_DATE: Final[int] = 1
_FALLBACK: Final[int] = 2
_FAULT_BITS: Final[int] = 24
_FAULT_SCALE: Final[int] = 1 << _FAULT_BITS
_EPOCH: Final[date] = date(1970, 1, 1)
_HOUR_MINUTES: Final[tuple[str, ...]] = tuple(f"{m // 60:02d}:{m % 60:02d}" for m in range(24 * 60))
_SECONDS: Final[tuple[str, ...]] = tuple(f":{s:02d}" for s in range(60))
_DAY_CACHE: dict[int, str] = {}

Share = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
HttpErrorStatus = Annotated[int, msgspec.Meta(ge=400, le=599)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]


def mix64(value: int) -> int:
    """Scramble a 64-bit integer (the splitmix64 finaliser; a bijection).

    :param value: any integer; only its low 64 bits are used.
    :return: the mixed 64-bit value.
    """
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


def task_seed(task_id: str) -> int:
    """Derive the default seed of a task from its id.

    :param task_id: the task id as it appears in URLs.
    :return: the CRC-32 of the UTF-8 encoded id.
    """
    return zlib.crc32(task_id.encode())


def parse_ref(text: str) -> datetime:
    """Parse an ISO-8601 reference time into an aware UTC datetime.

    :param text: e.g. ``"2026-11-20T00:00:00Z"`` or ``"2026-11-20"``; a value
        without an offset is taken as UTC.
    :return: the time in UTC.
    :raises ValueError: if the text is not ISO-8601.
    """
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def utc_midnight(now: datetime | None = None) -> datetime:
    """Return the start of the current (or given) UTC day.

    :param now: an aware time; defaults to the current time.
    :return: midnight UTC of that day.
    """
    now = datetime.now(UTC) if now is None else now.astimezone(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


class Faults(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The fault set of a task; every field defaults to "no fault".

    Only :attr:`bad_date_share`, :attr:`fallback_share`, :attr:`set_fields`
    and :attr:`drop_fields` change record content; the other fields are applied
    by the HTTP layer.
    """

    #: Share of list/count requests answered with :attr:`error_status`.
    error_rate: Share = 0.0
    error_status: HttpErrorStatus = 500
    #: Delay added to every list/count request, in milliseconds.
    latency_ms: Annotated[float, msgspec.Meta(ge=0.0, le=60_000.0)] = 0.0
    #: Every n-th list request (counted since the faults were set) gets 429.
    rate_limit_every: NonNegativeInt = 0
    retry_after_s: NonNegativeInt = 1
    #: Share of list responses whose body is cut short (status stays 200).
    malformed_rate: Share = 0.0
    #: List responses come as ``{"code": 0, "data": {"items": [...]}}``.
    wrong_shape: bool = False
    #: Share of records with ``aae397 = "not-a-date"`` and no ``Collect_time``.
    bad_date_share: Share = 0.0
    #: Share of records without ``aae397`` but with a valid ``Collect_time``;
    #: for these ``Collect_time`` is exactly the true date.
    fallback_share: Share = 0.0
    #: Offsets whose list requests always fail with :attr:`fail_status`.
    fail_offsets: tuple[NonNegativeInt, ...] = ()
    fail_status: HttpErrorStatus = 500
    #: Full list pages lose their last record.
    short_pages: bool = False
    #: Fields every record gets (a new field, or an existing one with another
    #: value, e.g. of another JSON type), after :attr:`drop_fields` are removed.
    set_fields: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Fields removed from every record (a field the source stopped sending).
    drop_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Check that the two record-level shares do not overlap.

        :raises ValueError: if ``bad_date_share + fallback_share > 1``.
        """
        if self.bad_date_share + self.fallback_share > 1.0:
            msg = "bad_date_share + fallback_share must not exceed 1"
            raise ValueError(msg)


NO_FAULTS: Final[Faults] = Faults()


@dataclass(frozen=True)
class _Span:
    """Evenly spread ``count`` slots over the closed range ``[low, high]``."""

    low: int
    high: int
    count: int

    def slot(self, index: int, jitter: int) -> int:
        """Return the epoch second of slot ``index`` moved by ``jitter``.

        :param index: slot number, ``0 .. count - 1``.
        :param jitter: signed offset in seconds.
        :return: an epoch second inside ``[low, high]``.
        """
        width = self.high - self.low
        base = self.low + ((2 * index + 1) * width) // (2 * self.count)
        return min(self.high, max(self.low, base + jitter))


@dataclass(frozen=True)
class TaskConfig:
    """Immutable description of one task's data set.

    :param total0: number of records the task starts with.
    :param seed: seed of every derived value (ids, content, dates' jitter).
    :param ref: aware reference time the data set is built around; it is
        converted to UTC and truncated to whole seconds.
    :param window_days: length of the "recent" window before ``ref``.
    :param in_window_share: share of the initial records inside the window.
    :param history_days: how far back the old records reach.
    :param append_step_s: spacing of appended records after ``ref``.
    :param task_id: task id, mixed into record ids so that tasks sharing a
        seed still get distinct ids.
    """

    total0: int
    seed: int
    ref: datetime
    window_days: int = 7
    in_window_share: float = 0.3
    history_days: int = 365
    append_step_s: int = 60
    task_id: str = ""
    #: Records also carry ``city_code``, an ASCII code of their city (for routing by a field).
    city_codes: bool = False

    def __post_init__(self) -> None:
        """Validate the fields and normalise :attr:`ref`.

        :raises ValueError: on an inconsistent configuration.
        """
        if self.ref.tzinfo is None:
            msg = "ref must be timezone-aware"
            raise ValueError(msg)
        object.__setattr__(self, "ref", self.ref.astimezone(UTC).replace(microsecond=0))
        checks = (
            (self.total0 >= 0, "total0 must be >= 0"),
            (self.window_days >= 1, "window_days must be >= 1"),
            (
                self.history_days > self.window_days,
                "history_days must exceed window_days",
            ),
            (
                0.0 <= self.in_window_share <= 1.0,
                "in_window_share must be within [0, 1]",
            ),
            (self.append_step_s >= 1, "append_step_s must be >= 1"),
        )
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)

    @cached_property
    def salt(self) -> int:
        """Return the 64-bit salt combining the seed and the task id."""
        return mix64((self.seed & MASK64) ^ (task_seed(self.task_id) << 32))

    @cached_property
    def ref_epoch(self) -> int:
        """Return :attr:`ref` as whole epoch seconds."""
        return int(self.ref.timestamp())

    @cached_property
    def in_window_count(self) -> int:
        """Return how many initial records lie inside the window."""
        return round(self.in_window_share * self.total0)

    @cached_property
    def old_span(self) -> _Span:
        """Return the slots of the old records (before the window)."""
        low = self.ref_epoch - self.history_days * DAY_S
        high = self.ref_epoch - self.window_days * DAY_S - EDGE_S
        return _Span(low, high, max(1, self.total0 - self.in_window_count))

    @cached_property
    def window_span(self) -> _Span:
        """Return the slots of the in-window records."""
        low = self.ref_epoch - self.window_days * DAY_S + EDGE_S
        high = self.ref_epoch - EDGE_S
        return _Span(low, high, max(1, self.in_window_count))

    def to_json(self) -> dict[str, Any]:
        """Return the configuration as JSON-ready builtins (``ref`` as ISO).

        :return: a dict with every field except the task id.
        """
        return {
            "total0": self.total0,
            "seed": self.seed,
            "ref": self.ref.isoformat(),
            "window_days": self.window_days,
            "in_window_share": self.in_window_share,
            "history_days": self.history_days,
            "append_step_s": self.append_step_s,
            "city_codes": self.city_codes,
        }


@dataclass
class TaskState:
    """Mutable state of one task: its configuration and current total."""

    config: TaskConfig
    total: int = -1

    def __post_init__(self) -> None:
        """Start at the configuration's initial total unless given."""
        if self.total < 0:
            self.total = self.config.total0

    def append(self, count: int) -> int:
        """Grow the data set by ``count`` records.

        :param count: records to add, ``>= 0``.
        :return: the new total.
        :raises ValueError: if ``count`` is negative.
        """
        if count < 0:
            msg = "n must be >= 0"
            raise ValueError(msg)
        self.total += count
        return self.total

    def truncate(self, total: int) -> int:
        """Shrink the data set to its first ``total`` records.

        Records are a pure function of their offset, so growing again later
        brings the same records back.

        :param total: the new total, ``0 <= total <= current total``.
        :return: the new total.
        :raises ValueError: if ``total`` is negative or would grow the set.
        """
        if not 0 <= total <= self.total:
            msg = f"total must be within [0, {self.total}]"
            raise ValueError(msg)
        self.total = total
        return self.total


def _id_hash(cfg: TaskConfig, offset: int) -> int:
    """Return the per-record hash the id and date jitter derive from.

    :param cfg: the task configuration.
    :param offset: record offset.
    :return: a 64-bit value, unique per offset for a given configuration.
    """
    return mix64((cfg.salt + offset) & MASK64)


def _true_epoch(cfg: TaskConfig, offset: int, id_hash: int) -> int:
    """Return the true date of a record as epoch seconds.

    :param cfg: the task configuration.
    :param offset: record offset, ``>= 0``.
    :param id_hash: :func:`_id_hash` of the offset.
    :return: whole epoch seconds (UTC).
    """
    if offset >= cfg.total0:
        return cfg.ref_epoch + (offset - cfg.total0 + 1) * cfg.append_step_s
    jitter = id_hash % (2 * JITTER_S + 1) - JITTER_S
    old = cfg.total0 - cfg.in_window_count
    if offset < old:
        return cfg.old_span.slot(offset, jitter)
    return cfg.window_span.slot(offset - old, jitter)


def true_date(cfg: TaskConfig, offset: int) -> datetime:
    """Return the true publication time of the record at ``offset``.

    :param cfg: the task configuration.
    :param offset: record offset, ``>= 0``.
    :return: an aware UTC datetime with second precision.
    """
    epoch = _true_epoch(cfg, offset, _id_hash(cfg, offset))
    return datetime.fromtimestamp(epoch, UTC)


def _local_text(epoch: int, separator: str) -> str:
    """Render epoch seconds as Asia/Shanghai local time.

    :param epoch: whole epoch seconds.
    :param separator: text between date and time (``" "`` or ``"T"``).
    :return: ``YYYY-MM-DD<separator>HH:MM:SS``.
    """
    day, second = divmod(epoch + LOCAL_OFFSET_S, DAY_S)
    day_text = _DAY_CACHE.get(day)
    if day_text is None:
        day_text = (_EPOCH + timedelta(days=day)).isoformat()
        _DAY_CACHE[day] = day_text
    minute, sec = divmod(second, 60)
    return f"{day_text}{separator}{_HOUR_MINUTES[minute]}{_SECONDS[sec]}"


def _fault_kind(faults: Faults, content_hash: int) -> int:
    """Classify a record for the record-level faults.

    :param faults: the active faults.
    :param content_hash: the record's content hash.
    :return: :data:`_NORMAL`, :data:`_BAD_DATE` or :data:`_FALLBACK`.
    """
    point = content_hash >> (64 - _FAULT_BITS)
    bad = faults.bad_date_share * _FAULT_SCALE
    if point < bad:
        return _BAD_DATE
    if point < bad + faults.fallback_share * _FAULT_SCALE:
        return _FALLBACK
    return _NORMAL


def make_record(cfg: TaskConfig, offset: int, faults: Faults | None = None) -> dict[str, Any]:
    """Generate the record at ``offset``.

    :param cfg: the task configuration.
    :param offset: record offset, ``>= 0``.
    :param faults: active faults; only the record-level shares matter.
    :return: the record with keys ``id, aae397, Collect_time, title, company,
        city, salary, education, description`` (date keys may be missing or
        invalid under faults).
    """
    id_hash = mix64((cfg.salt + offset) & MASK64)
    epoch = _true_epoch(cfg, offset, id_hash)
    bits = mix64(id_hash)
    city = (bits >> 5) & 15
    record = {"id": f"{id_hash:016x}"}
    kind = 0 if faults is None else _fault_kind(faults, bits)
    if kind == _NORMAL:
        record["aae397"] = _local_text(epoch, " ")
        collected = epoch + 60 + ((bits >> 30) & 1023) % 840
        record["Collect_time"] = _local_text(collected, "T") + _LOCAL_SUFFIX
    elif kind == _BAD_DATE:
        record["aae397"] = BAD_DATE
    else:
        # The only date of a fallback record carries its true date, so parsing it
        # agrees exactly with ground_truth() even next to a window edge.
        record["Collect_time"] = _local_text(epoch, "T") + _LOCAL_SUFFIX
    record["title"] = TITLES[bits & 31]
    record["company"] = COMPANIES[city][(bits >> 9) & 127]
    record["city"] = CITIES[city]
    if cfg.city_codes:
        record["city_code"] = CITY_CODES[city]
    record["salary"] = SALARIES[(bits >> 16) & 255]
    record["education"] = EDUCATION[(bits >> 24) & 7]
    record["description"] = DESCRIPTIONS[(bits >> 27) & 7]
    if faults is not None and (faults.drop_fields or faults.set_fields):
        for name in faults.drop_fields:
            record.pop(name, None)
        record.update(faults.set_fields)
    return record


def make_page(cfg: TaskConfig, start: int, end: int, faults: Faults | None = None) -> list[dict[str, Any]]:
    """Generate the records at offsets ``start .. end - 1``.

    :param cfg: the task configuration.
    :param start: first offset.
    :param end: one past the last offset.
    :param faults: active faults.
    :return: the records in offset order.
    """
    return [make_record(cfg, offset, faults) for offset in range(start, end)]


def ground_truth(
    cfg: TaskConfig,
    total: int,
    ref: datetime,
    days: float,
    tolerance_s: float = 0,
    faults: Faults | None = None,
) -> dict[str, Any]:
    """Compute which records fall into a date window, from their true dates.

    :param cfg: the task configuration.
    :param total: current number of records (offsets ``0 .. total - 1``).
    :param ref: aware end of the window.
    :param days: window length before ``ref``.
    :param tolerance_s: seconds after ``ref`` still counted.
    :param faults: active faults; bad-date records are never in the window,
        fallback records count by their true date.
    :return: ``in_window_ids`` (sorted), ``in_window_count``,
        ``bad_date_ids`` (sorted) and ``total``.
    """
    end = ref.timestamp() + tolerance_s
    start = ref.timestamp() - days * DAY_S
    active = faults if faults is not None else NO_FAULTS
    check_faults = active.bad_date_share > 0
    in_window: list[str] = []
    bad: list[str] = []
    for offset in range(total):
        id_hash = _id_hash(cfg, offset)
        if check_faults and _fault_kind(active, mix64(id_hash)) == _BAD_DATE:
            bad.append(f"{id_hash:016x}")
        elif start <= _true_epoch(cfg, offset, id_hash) <= end:
            in_window.append(f"{id_hash:016x}")
    in_window.sort()
    bad.sort()
    return {
        "in_window_ids": in_window,
        "in_window_count": len(in_window),
        "bad_date_ids": bad,
        "total": total,
    }
