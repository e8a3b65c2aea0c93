"""Pure record handling for one page: filter, transform, key and encode the Kafka messages."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any

import msgspec

from crawler_ops.filtering import DateRule, Verdict, Window, classify
from crawler_ops.results import DeadLetter

Transform = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Message:
    """One Kafka message: key, JSON value, headers; ``topic`` None means the task's topic."""

    key: bytes
    value: bytes
    headers: Sequence[tuple[str, bytes]]
    topic: str | None = None


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
    dead_letters: list[DeadLetter] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return len(self.messages)


Record = Mapping[str, Any] | msgspec.Raw


@functools.cache
def head_decoder(fields: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """Decodes only ``fields`` of a record's JSON (others are skipped without building Python objects)."""
    attrs = [(f"f{i}", Any, None) for i in range(len(fields))]
    struct = msgspec.defstruct("RecordHead", attrs, rename={f"f{i}": name for i, name in enumerate(fields)})
    return msgspec.json.Decoder(struct)


def record_head(record: Record, fields: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``fields`` (absent ones as None) of a decoded record or of a record's raw JSON."""
    if not isinstance(record, msgspec.Raw):
        return {name: record.get(name) for name in fields}
    try:
        head = head_decoder(fields).decode(record)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a JSON object: {exc}") from exc
    return {name: getattr(head, f"f{i}") for i, name in enumerate(fields)}


def full_record(record: Record) -> Any:
    """The whole record as Python objects (a mapping is returned as it is)."""
    return msgspec.json.decode(record) if isinstance(record, msgspec.Raw) else record


def build_messages(
    records: Sequence[Record],
    first_offset: int,
    rule: DateRule,
    window: Window,
    key_field: str | None,
    headers: Sequence[tuple[str, bytes]],
    transform: Transform | None = None,
    tz: tzinfo | None = None,
) -> PageResult:
    """Filter a page (records at ``first_offset``, ``first_offset + 1``, ...) into Kafka messages.

    Records may be decoded mappings or the source's raw JSON (``msgspec.Raw``): then only the date and
    key fields are decoded, and a kept record is published as the source sent it unless a transform
    reshapes it. Records with no parseable date, or whose transform raises, are dead-lettered with the
    reason, never dropped silently. Headers carry the crawl task, the run and the record's source offset.
    """
    tz = tz or rule.tz
    fields = (*rule.fields, key_field) if key_field else rule.fields
    result = PageResult()
    for index, record in enumerate(records):
        offset = first_offset + index
        try:
            head = record_head(record, fields)
        except ValueError as exc:
            raise ValueError(f"the record at source offset {offset} is {exc}") from exc
        verdict, detail = classify(head, rule, window, tz)
        if verdict is Verdict.EXPIRED:
            result.expired += 1
            continue
        if verdict is Verdict.BAD_DATE:
            result.dead_letters.append(DeadLetter(offset, detail, full_record(record)))
            continue
        try:
            message = make_message(record, head, key_field, transform)
        except Exception as exc:  # noqa: BLE001 - a transform failing on one record dead-letters that record
            result.dead_letters.append(
                DeadLetter(offset, f"transform or encoding failed: {exc!r}", full_record(record))
            )
            continue
        result.messages.append(Message(message[0], message[1], [*headers, ("source_offset", str(offset).encode())]))
    return result


def make_message(
    record: Record, head: Mapping[str, Any], key_field: str | None, transform: Transform | None
) -> tuple[bytes, bytes]:
    """Key and value of one kept record; raw JSON is passed through when nothing needs the decoded record."""
    key_value = head.get(key_field) if key_field else None
    if isinstance(record, msgspec.Raw) and transform is None and key_value not in (None, ""):
        return str(key_value).encode(), bytes(record)
    decoded = full_record(record)
    value = _encoder.encode(transform(decoded) if transform else decoded)
    return record_key(decoded, key_field), value


def dead_letter_messages(
    dead_letters: Sequence[DeadLetter],
    topic: str,
    task_id: str,
    run_id: str,
    key_field: str | None,
    headers: Sequence[tuple[str, bytes]],
) -> list[Message]:
    """Messages for the dead-letter topic: the record as the source sent it, with the reason and offset."""
    messages = []
    for offset, reason, record in dead_letters:
        key = record_key(record, key_field) if isinstance(record, Mapping) else f"{task_id}:{offset}".encode()
        value = _encoder.encode(
            {"task": task_id, "run_id": run_id, "source_offset": offset, "reason": reason, "record": record}
        )
        extra = [("source_offset", str(offset).encode()), ("reason", reason.encode()[:1000])]
        messages.append(Message(key, value, [*headers, *extra], topic))
    return messages
