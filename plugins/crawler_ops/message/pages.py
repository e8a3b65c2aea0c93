"""A page of records as the source hook hands it over: the records as raw JSON, the fields filtering reads of each
(their *head*), and dotted JSON paths into a decoded answer (pure: no I/O)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from crawler_ops.message.shaping import MessageShape, as_shape


def json_path(document: Any, path: str) -> Any:
    """Follow a dotted path (``data.data``) through nested mappings; KeyError names the missing step."""
    node = document
    for step in path.split("."):
        if not isinstance(node, Mapping) or step not in node:
            raise KeyError(step)
        node = node[step]
    return node


Record = Mapping[str, Any] | msgspec.Raw


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
