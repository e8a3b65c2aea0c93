"""What the source hook does with a body's bytes (read within their bounds by :mod:`crawler_ops.hooks.answers`):
decode a page envelope in one pass, read a count, and map decoding problems to :class:`SourceError`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec

from crawler_ops.errors import SourceError
from crawler_ops.message.pages import Page, head_struct, json_path

#: A count answer is a few bytes; it is read to this size at most.
COUNT_BODY_BYTES = 64 * 1024


@functools.cache
def page_decoder(records_path: str, item: Any = msgspec.Raw) -> msgspec.json.Decoder[Any]:
    """Decodes a page envelope down to ``records_path`` in one pass, each record as ``item`` (raw JSON, or a
    struct of some of its fields).

    For ``data.data`` the type is ``{"data": {"data": [item, ...]}}``; other keys are skipped, and each
    level's value is reached through the attribute ``v``.
    """
    return envelope_decoder(records_path, list[item])


@functools.lru_cache(maxsize=64)
def counted_page_decoder(records_path: str, limit: int) -> msgspec.json.Decoder[Any]:
    """Like :func:`page_decoder` (records as raw JSON), but the records list decodes into an array-like struct of
    ``limit`` optional fields: msgspec stops at the record after the ``limit``-th, so a page of a million records for
    a batch of 100 costs 101 records, not a million (a length constraint on a list is checked only once it is
    built)."""
    fields = [(f"r{i}", msgspec.Raw, msgspec.UNSET) for i in range(limit)]
    records = msgspec.defstruct(f"Records{limit}", fields, array_like=True, forbid_unknown_fields=True)
    return envelope_decoder(records_path, records)


def envelope_decoder(records_path: str, node: Any) -> msgspec.json.Decoder[Any]:
    for depth, step in enumerate(reversed(records_path.split("."))):
        node = msgspec.defstruct(f"PageLevel{depth}", [("v", node)], rename={"v": step})
    return msgspec.json.Decoder(node)


class PageTooLongError(ValueError):
    """A page holds more records than its request asked for (``limit``, sent as the query parameter ``param``)."""

    def __init__(self, limit: int, param: str) -> None:
        super().__init__(f"more than {limit} records")
        self.limit, self.param = limit, param


def unwrap(envelope: Any, records_path: str) -> Any:
    """The records list inside an envelope decoded by :func:`page_decoder`."""
    for _ in records_path.split("."):
        envelope = envelope.v
    return envelope


def count_total(document: Any, total_path: str, label: str) -> int:
    """The total at ``total_path`` of a count response; anything but a non-negative integer fails for good."""
    try:
        total = json_path(document, total_path)
    except KeyError as exc:
        raise SourceError(
            f"{label}: count response has no '{total_path}' (missing '{exc.args[0]}'); check source.total_path",
            retriable=False,
        ) from exc
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise SourceError(f"{label}: total at '{total_path}' is {total!r}, not a non-negative integer", retriable=False)
    return total


#: Finds a page's records in its body elsewhere (a chunk's page check helper), given the most records it may hold:
#: the page, or None to decode the body here.
Split = Callable[[bytes, int | None], Page | None]


def decode_page(
    body: bytes,
    records_path: str,
    fields: tuple[str, ...],
    limit: int | None = None,
    limit_param: str = "limit",
    split: Split | None = None,
) -> Page:
    """The records of one page as raw JSON, one per record, with the values of ``fields`` of each. Two passes over
    the body: the records, then their ``fields`` only. Either pass skips what it does not keep, so both cost less
    than one full decode. With ``limit``, the first pass stops at the record after the ``limit``-th and raises
    :class:`PageTooLongError`, before the second pass decodes anything. With ``split``, its page is taken when it
    gives one (of at most ``limit`` records): a body it could not split is decoded here, which names what is wrong."""
    if split is not None:
        page = split(body, limit)
        if page is not None:
            return page
    if limit is None:
        records = unwrap(page_decoder(records_path).decode(body), records_path)
    else:
        try:
            counted = unwrap(counted_page_decoder(records_path, limit).decode(body), records_path)
        except msgspec.ValidationError as exc:
            if "array` of at most length" in str(exc):
                raise PageTooLongError(limit, limit_param) from exc
            raise
        records = [r for r in msgspec.structs.astuple(counted) if r is not msgspec.UNSET]
    if not fields:
        return Page(records)
    try:
        heads = unwrap(page_decoder(records_path, head_struct(fields)).decode(body), records_path)
    except msgspec.DecodeError:
        return Page(records)  # a record not an object, or a date or key not UTF-8: filtering names its offset
    return Page(records, fields, [msgspec.structs.astuple(head) for head in heads])


def decode_body(body: bytes, decode: Callable[[bytes], Any] | None, label: str, records_path: str) -> Any:
    """``body`` decoded by ``decode`` (or as any JSON). A body of the wrong shape or nested too deeply fails for good;
    malformed JSON (a truncated body, say) is retriable."""
    try:
        return decode(body) if decode is not None else msgspec.json.decode(body)
    except PageTooLongError as exc:
        raise SourceError(
            f"{label} has {exc} (the source ignores '{exc.param}'); not decoded further", retriable=True
        ) from exc
    except msgspec.ValidationError as exc:
        raise SourceError(
            f"{label} has no list of records at '{records_path}' ({exc}); the source changed shape "
            "or source.records_path is wrong",
            retriable=False,
        ) from exc
    except msgspec.DecodeError as exc:
        raise SourceError(f"{label} returned malformed JSON ({len(body)} bytes): {exc}", retriable=True) from exc
    except RecursionError as exc:
        raise SourceError(
            f"{label} returned JSON nested too deeply to decode ({len(body)} bytes); retrying will not change it",
            retriable=False,
        ) from exc
