"""A page of records as the source hook hands it over: the records as raw JSON, the fields filtering reads of each
(their *head*), and dotted JSON paths into a decoded answer (pure: no I/O)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from crawler_ops.message.shaping import MessageShape, as_shape


def path_steps(path: str) -> list[str]:
    """The keys of a dotted path in order; none for ``''``, the document itself (a records path of a bare list)."""
    return path.split(".") if path else []


def json_path(document: Any, path: str) -> Any:
    """Follow a dotted path (``data.data``) through nested mappings; KeyError names the missing step."""
    node = document
    for step in path.split("."):
        if not isinstance(node, Mapping) or step not in node:
            raise KeyError(step)
        node = node[step]
    return node


Record = Mapping[str, Any] | msgspec.Raw


_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])


def body_path(body: bytes, path: str) -> Any:
    """The value at a dotted ``path`` of a JSON body (None when the body has no such path), each object level on
    the way decoded into its keys and raw values only: the records of a page beside a cursor are never built.

    A number too large for 64 bits is given as its text. :raises msgspec.DecodeError: the body is no JSON.
    """
    node: bytes | msgspec.Raw = body
    for step in path.split("."):
        try:
            level = _LEVEL.decode(node)
        except msgspec.ValidationError:  # not an object: the path is not there
            return None
        if step not in level:
            return None
        node = level[step]
    try:
        return msgspec.json.decode(node)
    except msgspec.ValidationError:  # a number past 64 bits: its text
        return bytes(node).decode()


def head_fields(date_fields: tuple[str, ...], extra: MessageShape | str | None) -> tuple[str, ...]:
    """The fields filtering reads of every record: the date fields in order of preference, then those the key and
    headers read (``extra``: a message shape, or a key field)."""
    more = as_shape(extra).fields
    return (*date_fields, *(name for name in more if name not in date_fields))


@functools.cache
def head_struct(fields: tuple[str, ...]) -> type[msgspec.Struct]:
    """A struct of ``fields`` only (absent ones None): decoding a record into it skips every other field
    without building Python objects."""
    attrs = [(f"f{i}", Any, None) for i in range(len(fields))]
    return msgspec.defstruct("RecordHead", attrs, rename={f"f{i}": name for i, name in enumerate(fields)})


@functools.cache
def head_decoder(fields: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """Decodes only ``fields`` of a record's JSON."""
    return msgspec.json.Decoder(head_struct(fields))


class Page(list[msgspec.Raw]):
    """The records of one page as raw JSON, and, when the page's decode read them too, the values of
    ``fields`` of each record (see :func:`head_fields`), as tuples.

    :param records: the records.
    :param fields: the fields read.
    :param heads: their values, one tuple per record; None when they were not read.

    ``utf8_checked`` is set once every record was found UTF-8 (:mod:`crawler_ops.crawl.page_check`): filtering then
    does not check each record it publishes as sent again.
    """

    def __init__(
        self,
        records: Iterable[msgspec.Raw],
        fields: tuple[str, ...] = (),
        heads: list[tuple[Any, ...]] | None = None,
        utf8_checked: bool = False,
    ) -> None:
        super().__init__(records)
        self.fields = fields
        self.heads = heads
        self.utf8_checked = utf8_checked


def record_head(record: Record, fields: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``fields`` (absent ones as None) of a decoded record or of a record's raw JSON."""
    if not isinstance(record, msgspec.Raw):
        return {name: record.get(name) for name in fields}
    try:
        head = head_decoder(fields).decode(record)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a JSON object: {exc}") from exc
    return {name: getattr(head, f"f{i}") for i, name in enumerate(fields)}
