"""Pure record handling for one page: filter, transform, key and encode the Kafka messages, and the size checks
(a message Kafka would refuse, a dead letter's record over the stored cap)."""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from itertools import count, repeat
from typing import Any

import msgspec

from crawler_ops.message.filtering import DateRule, Verdict, Window, WindowTest
from crawler_ops.message.pages import Page, Record, head_decoder, head_fields
from crawler_ops.message.shaping import MILLISECOND, NAIVE_EPOCH, HeaderMaker, MessageShape, as_shape, epoch_ms
from crawler_ops.message.values import Misfit, ValueCodec
from crawler_ops.results import DeadLetter

Transform = Callable[[dict[str, Any]], Any]


class Message(msgspec.Struct, frozen=True, gc=False):
    """One Kafka message: key, JSON value, headers (a list, as the producer takes them), timestamp; ``topic``
    None means the task's topic.

    A record published as the source sent it keeps its value as the ``msgspec.Raw`` slice of the page body
    (the producer reads any bytes-like value): copying it to ``bytes`` first cost more than the rest of
    filtering. A frozen struct rather than a dataclass: one is made per kept record, and a struct is made ten
    times faster.
    """

    key: bytes
    value: bytes | msgspec.Raw
    headers: list[tuple[str, bytes]]
    topic: str | None = None
    timestamp: int = 0  # milliseconds since the epoch; 0: the time it is produced
    routed: bool = False  # a record sent to ``topic`` by the task's topic_template (not a dead letter, not a marker)

    def key_value_size(self) -> int:
        return len(self.value) + len(self.key)

    def size(self) -> int:
        return len(self.value) + len(self.key) + sum(len(name) + len(value) for name, value in self.headers)


_encoder = msgspec.json.Encoder()

# A dead letter's record is encoded again after filtering (JSONB in PostgreSQL, JSON for the dead-letter topic) by
# encoders that recurse on the crawl's own stack, which a page's decode (in a fetch thread) did not have to share:
# a record nested deeper than this is kept as the start of its JSON text, so storing it cannot fail its batch.
DEAD_LETTER_MAX_DEPTH = 200
DEAD_LETTER_TEXT_BYTES = 64 * 1024
# A dead letter's record is stored (and sent to the dead-letter topic) whole up to this size, then cut.
DEAD_LETTER_MAX_BYTES = 64 * 1024


# Validates a raw record's UTF-8 in place: codecs reads any bytes-like value (a msgspec.Raw slice of the page) without
# copying it to bytes first; ``final`` so that a character cut at the record's end is an error too.
_utf8_decode = codecs.utf_8_decode


def record_key(record: Mapping[str, Any], key_field: str | None) -> bytes:
    """The configured id field's value, else a SHA-256 of the record's canonical JSON (stable across runs)."""
    return MessageShape.field(key_field).record_key(record)


class SchemaMisfit(DeadLetter):
    """The dead letter of a kept record the task's value schema does not accept (its reason says where)."""

    __slots__ = ()


def misfit(record: Record, offset: int, codec: ValueCodec, exc: Misfit) -> SchemaMisfit:
    reason = f"does not fit the value schema (id {codec.schema_id}): {exc}; not published"
    return SchemaMisfit(offset, reason, dead_letter_record(record))


@dataclass
class PageResult:
    """What filtering one page produced: messages to publish, counts, and dead letters."""

    messages: list[Message] = field(default_factory=list)
    expired: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return len(self.messages)

    @property
    def misfits(self) -> list[SchemaMisfit]:
        """The kept records the value schema does not accept (dead letters among the others)."""
        return [letter for letter in self.dead_letters if isinstance(letter, SchemaMisfit)]

    def add(self, kept: Message | DeadLetter) -> None:
        """Add a kept record's message, or its dead letter when it could not be made."""
        if isinstance(kept, Message):
            self.messages.append(kept)
        else:
            self.dead_letters.append(kept)


def full_record(record: Record) -> Any:
    """The whole record as Python objects (a mapping is returned as it is)."""
    return msgspec.json.decode(record) if isinstance(record, msgspec.Raw) else record


def dead_letter_record(record: Record) -> Any:
    """The record as its dead letter keeps it: decoded; or, when it does not decode or nests deeper than
    ``DEAD_LETTER_MAX_DEPTH``, ``{"unreadable": why, "text": the start of its JSON text}``."""
    try:
        decoded = full_record(record)
    except RecursionError:
        return unreadable(record, "nested too deeply to decode")
    except msgspec.DecodeError as exc:
        return unreadable(record, f"does not decode: {exc}")
    if nests_deeper(decoded, DEAD_LETTER_MAX_DEPTH):
        return unreadable(record, f"nested more than {DEAD_LETTER_MAX_DEPTH} levels deep")
    return decoded


def unreadable(record: Record, why: str) -> dict[str, Any]:
    if not isinstance(record, msgspec.Raw):
        return {"unreadable": why, "text": None}
    return {"unreadable": why, "text": bytes(record)[:DEAD_LETTER_TEXT_BYTES].decode("utf-8", "replace")}


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels deep in ``value``; level by level, no recursion."""
    level = [value]
    for _ in range(limit + 1):
        level = [child for node in level if isinstance(node, (dict, list)) for child in children(node)]
        if not level:
            return False
    return True


def children(node: dict[str, Any] | list[Any]) -> Iterable[Any]:
    return node.values() if isinstance(node, dict) else node


def build_messages(
    records: Sequence[Record],
    first_offset: int,
    rule: DateRule,
    window: Window,
    key: MessageShape | str | None,
    headers: Sequence[tuple[str, bytes]],
    transform: Transform | None = None,
    tz: tzinfo | None = None,
    run: Mapping[str, str] | None = None,
    value: ValueCodec | None = None,
) -> PageResult:
    """Filter a page (records at ``first_offset``, ``first_offset + 1``, ...) into Kafka messages.

    Records may be decoded mappings or the source's raw JSON (``msgspec.Raw``): then only the date, key and header
    fields are decoded, and a kept record is published as the source sent it unless a transform reshapes it. Records
    with no parseable date, or whose transform raises, are dead-lettered with the reason, never dropped silently.
    Headers carry the crawl task, the run and the record's source offset, then the shape's own (``run``: the
    ``task``, ``run_id`` and ``ref`` its templates may read). ``key``: the message shape, or a key field.
    ``value``: frames each value for a Schema Registry; a record its schema does not accept becomes a
    :class:`SchemaMisfit` dead letter.
    """
    shape = as_shape(key)
    tz = tz or rule.tz
    reader = HeadReader(rule.fields, shape)
    heads = reader.read_page(records, first_offset)
    moments: list[datetime | None] | None = [] if shape.record_time else None
    verdicts = WindowTest(rule, window, tz).verdicts(heads, moments)
    result = PageResult()
    maker = HeaderMaker(shape, reader.fields, run or {})
    extra = maker.headers if maker else None
    keys = reader.key_indexes
    route = shape.topic
    route_at = [reader.fields.index(name) for name in route.names] if route is not None else []
    problems: dict[str, str | None] = {}  # routed topic -> why no record can go there (None: fine)
    # The common case, a kept raw record keyed by one field, is written inline: it runs once per published record.
    index = keys[0] if shape.key_field is not None else -1
    as_sent = transform is None and index >= 0
    utf8_checked = isinstance(records, Page) and records.utf8_checked
    raw, append, keep, utf8, stamp = msgspec.Raw, result.messages.append, Verdict.KEEP, _utf8_decode, epoch_ms
    # A date ahead of the clock is stamped with the clock: brokers refuse timestamps far ahead of theirs
    # (message.timestamp.after.max.ms, an hour by default), which would fail the batch at every attempt.
    latest = int(time.time() * 1000)
    naive_epoch, ms, zone_offset = NAIVE_EPOCH, MILLISECOND, tz.utcoffset
    shifts: dict[timedelta, int] = {}  # the zone's offsets met on this page, in milliseconds
    dates = moments if moments is not None else repeat(None)
    rows = zip(count(first_offset), records, heads, verdicts, dates, strict=False)
    for offset, record, head, (verdict, detail), moment in rows:
        if verdict is keep:
            key_text = head[index] if index >= 0 else shape.key_of([head[i] for i in keys])
            more = extra(head, offset) if extra is not None else ()
            if moment is None:
                timestamp = 0
            elif moment.tzinfo is None:
                # :func:`epoch_ms` of a wall time, inline: it runs once per published record, and floor-dividing
                # timedeltas cost more than the rest of making the message.
                since, zone = moment - naive_epoch, zone_offset(moment)
                shift = shifts.get(zone)  # type: ignore[arg-type]
                if shift is None:
                    shift = shifts[zone] = zone // ms  # type: ignore[index,operator]
                wall_ms = since.days * 86_400_000 + since.seconds * 1000 + since.microseconds // 1000 - shift
                timestamp = wall_ms if wall_ms < latest else latest
            else:
                timestamp = min(stamp(moment, tz), latest)
            topic = route.render([head[i] for i in route_at]) if route is not None else None
            if topic is not None:
                if topic not in problems:
                    problems[topic] = shape.topic_problem(topic)
                if problems[topic] is not None:
                    result.dead_letters.append(DeadLetter(offset, str(problems[topic]), dead_letter_record(record)))
                    continue
            if as_sent and record.__class__ is raw and key_text is not None and key_text != "":
                # A record published as sent skipped the decode that checks its text's UTF-8: consumers could not
                # read it. Checked here unless its whole page was (try costs nothing when nothing raises).
                if not utf8_checked:
                    try:
                        utf8(record, "strict", True)
                    except UnicodeDecodeError as exc:
                        result.dead_letters.append(invalid_utf8(record, offset, exc))
                        continue
                payload: bytes | msgspec.Raw = record
                if value is not None:
                    try:
                        payload = value.encode_raw(record)
                    except Misfit as exc:
                        result.dead_letters.append(misfit(record, offset, value, exc))
                        continue
                own = [*headers, ("source_offset", b"%d" % offset), *more]
                append(Message(str(key_text).encode(), payload, own, topic, timestamp, topic is not None))
            else:
                made = kept_message(
                    record, key_text, shape, transform, headers, offset, timestamp, more, topic, value, utf8_checked
                )
                result.add(made)
        elif verdict is Verdict.EXPIRED:
            result.expired += 1
        elif head is reader.undecodable:
            result.dead_letters.append(undecodable(record, offset))
        else:
            reason = "nested too deeply to read its date fields" if head is reader.too_deep else detail
            result.dead_letters.append(DeadLetter(offset, reason, dead_letter_record(record)))
    return result


def invalid_utf8(record: msgspec.Raw, offset: int, exc: UnicodeDecodeError) -> DeadLetter:
    """The dead letter of a raw record whose text is not UTF-8: the reason names the field and the byte; the record
    is kept with U+FFFD for each invalid sequence."""
    data = bytes(record)
    reason = f"invalid UTF-8 in {utf8_field(data)} (byte {exc.start} of the record); not published"
    return DeadLetter(offset, reason, dead_letter_record(msgspec.Raw(data.decode("utf-8", "replace").encode())))


def undecodable(record: Record, offset: int) -> DeadLetter:
    """The dead letter of a record whose date or key fields did not decode (though the page did)."""
    if isinstance(record, msgspec.Raw):
        try:
            _utf8_decode(record, "strict", True)
        except UnicodeDecodeError as exc:
            return invalid_utf8(record, offset, exc)
    return DeadLetter(offset, "its date or key fields do not decode", dead_letter_record(record))


def utf8_field(data: bytes) -> str:
    """Where in a record's JSON the first invalid UTF-8 lies: ``field 'a.b[2]'``, with ``(a field name)`` when it
    is in a name; ``the record`` when its JSON cannot be read here."""
    try:  # surrogateescape: each invalid byte becomes a lone surrogate U+DC80..U+DCFF, found below
        document = json.loads(data.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return "the record"
    pending: list[tuple[str, Any]] = [("", document)]  # depth first, in the record's order, without recursion
    while pending:
        path, value = pending.pop()
        if isinstance(value, str) and has_escaped_bytes(value):
            return f"field '{path}'"
        if isinstance(value, dict):
            for name in value:
                if has_escaped_bytes(name):
                    return f"field '{path or '(record)'}' (a field name)"
            children = [(f"{path}.{name}" if path else name, child) for name, child in value.items()]
        elif isinstance(value, list):
            children = [(f"{path}[{index}]", child) for index, child in enumerate(value)]
        else:
            continue
        pending.extend(reversed(children))
    return "the record"


def has_escaped_bytes(text: str) -> bool:
    return any("\udc80" <= char <= "\udcff" for char in text)


class HeadReader:
    """Reads the date fields (in the rule's order), then the key field, of records: a tuple with None for
    an absent field. A raw record is decoded for these fields only, with a decoder made once per page.

    :param date_fields: the rule's date fields.
    :param key_field: the configured id field, if any (it may also be a date field).
    """

    def __init__(self, date_fields: tuple[str, ...], key: MessageShape | str | None) -> None:
        shape = as_shape(key)
        self.fields = head_fields(date_fields, shape)
        self.key_indexes = tuple(self.fields.index(name) for name in (shape.key.names if shape.key else ()))
        self.decode = head_decoder(self.fields).decode
        # The head of a record nested too deeply to read here, or whose fields do not decode (invalid UTF-8): no field
        # found (so no date), told apart by identity.
        self.too_deep: tuple[Any, ...] = tuple([None] * len(self.fields))
        self.undecodable: tuple[Any, ...] = tuple([None] * len(self.fields))  # a tuple of its own, even of one field

    def read_page(self, records: Sequence[Record], first_offset: int) -> list[tuple[Any, ...]]:
        if isinstance(records, Page) and records.heads is not None and records.fields == self.fields:
            return records.heads
        astuple, decode = msgspec.structs.astuple, self.decode
        try:
            return [astuple(decode(r)) if r.__class__ is msgspec.Raw else self.read(r) for r in records]
        except (msgspec.DecodeError, RecursionError):
            pass  # find the record that is not an object, for the message, that nests too deeply or is not UTF-8
        return [self.read(record, offset) for offset, record in enumerate(records, first_offset)]

    def read(self, record: Record, offset: int = -1) -> tuple[Any, ...]:
        if not isinstance(record, msgspec.Raw):
            return tuple(record.get(name) for name in self.fields)
        try:
            return msgspec.structs.astuple(self.decode(record))
        except RecursionError:
            return self.too_deep
        except msgspec.ValidationError as exc:
            raise ValueError(f"the record at source offset {offset} is not a JSON object: {exc}") from exc
        except msgspec.DecodeError:
            return self.undecodable


def kept_message(
    record: Record,
    key_value: Any,
    key: MessageShape | str | None,
    transform: Transform | None,
    headers: Sequence[tuple[str, bytes]],
    offset: int,
    timestamp: int = 0,
    more: Sequence[tuple[str, bytes]] = (),
    topic: str | None = None,
    value: ValueCodec | None = None,
    utf8_checked: bool = False,
) -> Message | DeadLetter:
    """The message of a kept record, or its dead letter when its text is not UTF-8, or the transform or the encoding
    fails. ``key_value``: the key's text from the record's head (None: none); the headers are ``headers``, the
    source offset, then ``more``; ``topic``: where the task's topic_template routes it (None: the task's topic);
    ``value``: frames the value for a Schema Registry; ``utf8_checked``: the record's text is known to be UTF-8."""
    if isinstance(record, msgspec.Raw) and not utf8_checked:
        try:
            _utf8_decode(record, "strict", True)
        except UnicodeDecodeError as exc:
            return invalid_utf8(record, offset, exc)
    try:
        shape = as_shape(key)
        key_bytes, payload = make_message(record, key_value if shape.key else None, shape, transform, value)
    except Misfit as exc:
        return misfit(record, offset, value, exc)  # type: ignore[arg-type]
    except RecursionError:
        return DeadLetter(offset, "nested too deeply to decode or encode", dead_letter_record(record))
    except Exception as exc:  # noqa: BLE001 - a transform failing on one record dead-letters that record
        return DeadLetter(offset, f"transform or encoding failed: {exc!r}", dead_letter_record(record))
    own = [*headers, ("source_offset", b"%d" % offset), *more]
    return Message(key_bytes, payload, own, topic, timestamp, topic is not None)


def make_message(
    record: Record, key_value: Any, shape: MessageShape, transform: Transform | None, value: ValueCodec | None = None
) -> tuple[bytes, bytes | msgspec.Raw]:
    """Key and value of one kept record; raw JSON is passed through when nothing needs the decoded record.
    ``value``: frames the value for a Schema Registry (a :class:`Misfit` when its schema does not accept it)."""
    if isinstance(record, msgspec.Raw) and transform is None and key_value not in (None, ""):
        return str(key_value).encode(), (record if value is None else value.encode_raw(record))
    decoded = full_record(record)
    shaped = transform(decoded) if transform else decoded
    payload = _encoder.encode(shaped) if value is None else value.encode(shaped)
    return shape.record_key(decoded), payload


def dead_letter_messages(
    dead_letters: Sequence[DeadLetter],
    topic: str,
    task_id: str,
    run_id: str,
    key: MessageShape | str | None,
    headers: Sequence[tuple[str, bytes]],
) -> list[Message]:
    """Messages for the dead-letter topic: the record as the source sent it, with the reason and offset; keyed as
    the topic keys records (``key``: the message shape, or a key field), timestamped when produced."""
    shape = as_shape(key)
    messages = []
    for offset, reason, record in dead_letters:
        key_bytes = shape.record_key(record) if isinstance(record, Mapping) else f"{task_id}:{offset}".encode()
        value = _encoder.encode(
            {"task": task_id, "run_id": run_id, "source_offset": offset, "reason": reason, "record": record}
        )
        extra = [("source_offset", str(offset).encode()), ("reason", reason.encode()[:1000])]
        messages.append(Message(key_bytes, value, [*headers, *extra], topic))
    return messages


def too_large(
    messages: list[Message], records: Sequence[Record], first_offset: int, limit: int, with_headers: bool = False
) -> tuple[list[Message], list[DeadLetter]]:
    """Split off the messages Kafka would refuse (key and value, and with ``with_headers`` the headers, over ``limit``
    bytes): dead letters with their size, the record stored cut to the dead-letter size cap, instead of a batch that
    fails at every attempt. The fixed headers are small and left out; a task's own headers may not be."""
    size_of = Message.size if with_headers else Message.key_value_size
    if all(size_of(m) <= limit for m in messages):
        return messages, []
    kept: list[Message] = []
    dead: list[DeadLetter] = []
    for message in messages:
        size = size_of(message)
        if size <= limit:
            kept.append(message)
            continue
        offset = int(dict(message.headers)["source_offset"])
        what = "with its headers " if with_headers else ""
        reason = f"message of {size} bytes {what}is larger than kafka.max_message_bytes ({limit}); not published"
        dead.append(DeadLetter(offset, reason, cap_record(dead_letter_record(records[offset - first_offset]))))
    return kept, dead


def cap_record(record: Any) -> Any:
    """Dead-lettered records are stored whole up to a size cap, then as the start of their JSON text, cut so the
    stored JSON (escapes included) stays within the cap and no character is split."""
    data = json.dumps(record, ensure_ascii=False, default=str).encode()
    if len(data) <= DEAD_LETTER_MAX_BYTES:
        return record
    limit = DEAD_LETTER_MAX_BYTES - 64  # room for the wrapper object
    while True:
        capped = {"truncated": True, "text": data[:limit].decode("utf-8", "ignore")}
        size = len(json.dumps(capped, ensure_ascii=False).encode())
        if size <= DEAD_LETTER_MAX_BYTES:
            return capped
        # Escaped quotes and backslashes took more room than the text: shrink it in proportion.
        limit = limit * (DEAD_LETTER_MAX_BYTES - 64) // size
