"""How a kept record becomes a Kafka message: its key, its timestamp and its headers, from templates over the record's
fields and the run. Pure: no I/O.

A template is text with ``{field}`` placeholders naming top-level record fields (``{Collect_time}``, ``{站点}``) and,
in headers only, ``{run.task}``, ``{run.run_id}``, ``{run.offset}`` (the record's source offset) and ``{run.ref}`` (the
run's reference time). ``{{`` and ``}}`` are literal braces. A field renders as its text (a number as ``str`` gives it);
a record lacking a field, or holding null or ``""`` in it, has no value for the template.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import msgspec

RUN_NAMES = ("run.task", "run.run_id", "run.offset", "run.ref")
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
RESERVED_PREFIX = "crawler_ops."  # marker topics (crawler_ops.batches.<task>)
# Headers every message carries; a configured header may not take their names.
FIXED_HEADERS = ("crawl_task", "run_id", "source_offset")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAIVE_EPOCH = datetime(1970, 1, 1)
MILLISECOND = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Template:
    """A parsed template: literal text and placeholders in order.

    :param parts: literal strings (``str``) and placeholders (``int``: the index of a name in :attr:`names`).
    :param names: the names the template reads: record fields, or ``run.*``.
    """

    text: str
    parts: tuple[str | int, ...]
    names: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, allow_run: bool = True) -> Template:
        """Parse ``text``; a ValueError names what is wrong (an unclosed brace, an empty or unknown ``run.`` name)."""
        parts: list[str | int] = []
        names: list[str] = []
        literal: list[str] = []
        i = 0
        while i < len(text):
            char = text[i]
            if char in "{}" and text[i + 1 : i + 2] == char:
                literal.append(char)
                i += 2
                continue
            if char == "}":
                raise ValueError(f"template {text!r}: '}}' at {i} closes nothing (write '}}}}' for a brace)")
            if char != "{":
                literal.append(char)
                i += 1
                continue
            end = text.find("}", i + 1)
            if end < 0:
                raise ValueError(f"template {text!r}: '{{' at {i} is not closed (write '{{{{' for a brace)")
            name = text[i + 1 : end].strip()
            if not name or "{" in name:
                raise ValueError(f"template {text!r}: placeholder at {i} names no field")
            if name.startswith("run."):
                if not allow_run:
                    raise ValueError(f"template {text!r}: {{{name}}} is run metadata, not allowed here (fields only)")
                if name not in RUN_NAMES:
                    raise ValueError(f"template {text!r}: unknown {{{name}}}; run metadata is {', '.join(RUN_NAMES)}")
            if literal:
                parts.append("".join(literal))
                literal = []
            if name not in names:
                names.append(name)
            parts.append(names.index(name))
            i = end + 1
        if literal:
            parts.append("".join(literal))
        return cls(text, tuple(parts), tuple(names))

    @property
    def fields(self) -> tuple[str, ...]:
        """The record fields the template reads (run metadata aside)."""
        return tuple(n for n in self.names if not n.startswith("run."))

    @property
    def single(self) -> bool:
        """The template is one placeholder and nothing else: its value is that name's value as text."""
        return self.parts == (0,)

    def render(self, values: Sequence[Any]) -> str | None:
        """The text, from one value per name (in :attr:`names` order); None when a value is missing."""
        out = []
        for part in self.parts:
            if part.__class__ is str:
                out.append(part)
                continue
            value = values[part]  # type: ignore[index]
            if value is None or value == "":
                return None
            out.append(value if value.__class__ is str else str(value))
        return "".join(out)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MessageShape:
    """What a task's messages carry besides the value.

    :param key: the key template; None keys every record by a SHA-256 of its canonical JSON. A record with no value
        for the template is keyed by that hash too.
    :param headers: (name, template) of the configured headers, after the fixed ones.
    :param record_time: the message timestamp is the record's date (else the time it is produced).
    :param topic: the template of the topic a record is routed to; None, or a record with no value for it: the
        task's topic.
    :param reserved: topics no record may be routed to (the dead-letter and marker topics).
    :param routes: shell-style patterns of the topics a record may be routed to (empty: any).
    """

    key: Template | None = None
    headers: tuple[tuple[str, Template], ...] = ()
    record_time: bool = True
    topic: Template | None = None
    reserved: frozenset[str] = frozenset()
    routes: tuple[str, ...] = ()

    @classmethod
    def of(cls, key: str | None, headers: Mapping[str, str] | None = None, record_time: bool = True) -> MessageShape:
        return cls(
            Template.parse(key, allow_run=False) if key else None,
            tuple((name, Template.parse(text)) for name, text in (headers or {}).items()),
            record_time,
        )

    @classmethod
    def field(cls, name: str | None, record_time: bool = False) -> MessageShape:
        """The shape of a key that is one field (None: the hash), with no headers of its own."""
        return cls(Template(f"{{{name}}}", (0,), (name,)) if name else None, (), record_time)

    @property
    def fields(self) -> tuple[str, ...]:
        """The record fields the key and headers read, each once, in order."""
        names = [
            *(self.key.fields if self.key else ()),
            *(f for _, t in self.headers for f in t.fields),
            *(self.topic.fields if self.topic else ()),
        ]
        return tuple(dict.fromkeys(names))

    def topic_problem(self, name: str) -> str | None:
        """Why a record cannot be routed to ``name`` (None: it can)."""
        if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            return f"topic_template gives {name[:300]!r}, not a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)"
        if name in self.reserved or name.startswith(RESERVED_PREFIX):
            return f"topic_template gives {name!r}, a topic of dead letters or markers; not published"
        if self.routes and not any(fnmatch.fnmatchcase(name, pattern) for pattern in self.routes):
            return f"topic_template gives {name!r}, not one of kafka.routed_topics; not published"
        return None

    @property
    def key_field(self) -> str | None:
        """The one field the key is, when the key is exactly one field (the fast path), else None."""
        return self.key.names[0] if self.key is not None and self.key.single else None

    def key_of(self, values: Sequence[Any]) -> str | None:
        """The key from the key template's values (in its names' order); None: none (hash the record)."""
        return None if self.key is None else self.key.render(values)

    def record_key(self, record: Mapping[str, Any]) -> bytes:
        """The key of a decoded record: the template's text, else a SHA-256 of its canonical JSON."""
        if self.key is not None:
            text = self.key.render([record.get(name) for name in self.key.names])
            if text is not None:
                return text.encode()
        return hash_key(record)


def as_shape(key: MessageShape | str | None) -> MessageShape:
    """A message shape, or the shape of a key that is one field (None: the hash), timestamped when produced."""
    return key if isinstance(key, MessageShape) else MessageShape.field(key)


def hash_key(record: Any) -> bytes:
    """A SHA-256 of a record's canonical JSON (keys sorted): stable across runs."""
    return hashlib.sha256(msgspec.json.encode(record, order="sorted")).hexdigest().encode()


class HeaderMaker:
    """The configured headers of a page's messages, from each record's values and the run.

    :param shape: the task's message shape.
    :param fields: the fields a page's head tuples hold, in order.
    :param run: run metadata: ``task``, ``run_id`` and ``ref``.
    """

    def __init__(self, shape: MessageShape, fields: tuple[str, ...], run: Mapping[str, str]) -> None:
        self.shape = shape
        self.templates = [
            (name, template, [fields.index(n) if not n.startswith("run.") else n for n in template.names])
            for name, template in shape.headers
        ]
        self.run = {f"run.{k}": v for k, v in run.items()}

    def __bool__(self) -> bool:
        return bool(self.templates)

    def headers(self, head: Sequence[Any], offset: int) -> list[tuple[str, bytes]]:
        """The configured headers of one record (a header whose template has no value is left out)."""
        out = []
        for name, template, where in self.templates:
            values = [head[w] if isinstance(w, int) else self.value(w, offset) for w in where]
            text = template.render(values)
            if text is not None:
                out.append((name, text.encode()))
        return out

    def value(self, name: str, offset: int) -> str:
        return str(offset) if name == "run.offset" else self.run[name]


def epoch_ms(moment: datetime, tz: tzinfo) -> int:
    """Milliseconds since the epoch of a date (a naive one is a wall time in ``tz``), as Kafka's timestamp."""
    if moment.tzinfo is None:  # a wall time: its offset from the zone (fold 0), without making it aware, 8x cheaper
        return (moment - NAIVE_EPOCH) // MILLISECOND - tz.utcoffset(moment) // MILLISECOND  # type: ignore[operator]
    return (moment - EPOCH) // MILLISECOND
