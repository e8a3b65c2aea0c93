"""Pure record handling for one page: filter, transform, key and encode the Kafka messages."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any

import msgspec

from crawler_ops.filtering import DateRule, Verdict, Window, classify

Transform = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Message:
    """One Kafka message: key, JSON value, headers."""

    key: bytes
    value: bytes
    headers: Sequence[tuple[str, bytes]]


_encoder = msgspec.json.Encoder()


def record_key(record: Mapping[str, Any], key_field: str | None) -> bytes:
    """The configured id field's value, else a SHA-256 of the record's canonical JSON (stable across runs)."""
    if key_field:
        value = record.get(key_field)
        if value not in (None, ""):
            return str(value).encode()
    canonical = msgspec.json.encode(record, order="sorted")
    return hashlib.sha256(canonical).hexdigest().encode()


@dataclass
class PageResult:
    """What filtering one page produced: messages to publish, counts, and dead letters."""

    messages: list[Message] = field(default_factory=list)
    expired: int = 0
    dead_letters: list[tuple[int, str, Any]] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return len(self.messages)


def build_messages(
    records: Sequence[dict[str, Any]],
    first_offset: int,
    rule: DateRule,
    window: Window,
    key_field: str | None,
    headers: Sequence[tuple[str, bytes]],
    transform: Transform | None = None,
    tz: tzinfo | None = None,
) -> PageResult:
    """Filter a page (records at ``first_offset``, ``first_offset + 1``, ...) into Kafka messages.

    Records with no parseable date, or whose transform raises, are dead-lettered with the reason, never
    dropped silently. Headers carry the crawl task, the run and the record's source offset.
    """
    tz = tz or rule.tz
    result = PageResult()
    for index, record in enumerate(records):
        offset = first_offset + index
        verdict, detail = classify(record, rule, window, tz)
        if verdict is Verdict.EXPIRED:
            result.expired += 1
            continue
        if verdict is Verdict.BAD_DATE:
            result.dead_letters.append((offset, detail, record))
            continue
        try:
            value = _encoder.encode(transform(record) if transform else record)
        except Exception as exc:  # noqa: BLE001 - a transform failing on one record dead-letters that record
            result.dead_letters.append((offset, f"transform or encoding failed: {exc!r}", record))
            continue
        result.messages.append(
            Message(
                key=record_key(record, key_field),
                value=value,
                headers=[*headers, ("source_offset", str(offset).encode())],
            )
        )
    return result
