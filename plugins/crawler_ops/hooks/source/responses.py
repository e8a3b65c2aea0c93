"""What the source hook does with a body's bytes (read within their bounds by :mod:`crawler_ops.hooks.answers`):
decode a page envelope in one pass, read a count, and map decoding problems to :class:`SourceError`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec

from crawler_ops.errors import SourceError
from crawler_ops.message.pages import Page, head_struct, json_path, path_steps

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
    for depth, step in enumerate(reversed(path_steps(records_path))):
        node = msgspec.defstruct(f"PageLevel{depth}", [("v", node)], rename={"v": step})
    return msgspec.json.Decoder(node)


class PageTooLongError(ValueError):
    """A page holds more records than its request asked for (``limit``, sent as the query parameter ``param``)."""

    def __init__(self, limit: int, param: str) -> None:
        super().__init__(f"more than {limit} records")
        self.limit, self.param = limit, param


def unwrap(envelope: Any, records_path: str) -> Any:
    """The records list inside an envelope decoded by :func:`page_decoder`."""
    for _ in path_steps(records_path):
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


_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])


def lines_as_array(body: bytes, label: str) -> bytes:
    """A JSON Lines body (one JSON value per line, blank lines and a final newline skipped, CRLF allowed) as one
    JSON array of its lines, in order, read like any page whose records_path is the body. A line that is not
    exactly one JSON value (malformed, or two values on one line) fails naming it: retriably, as a truncated body
    would be read again."""
    lines = [line for line in (raw.strip() for raw in body.split(b"\n")) if line]
    joined = b"[" + b",".join(lines) + b"]"
    try:
        values = _RAW_LIST.decode(joined)
    except (msgspec.DecodeError, RecursionError):
        values = None
    same = values is not None and len(values) == len(lines)
    if same and all(bytes(value) == line for value, line in zip(values or (), lines, strict=True)):
        return joined
    for number, line in enumerate(lines, 1):  # the first line that is not one JSON value, named
        try:
            msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise SourceError(
                f"{label}: JSON Lines body: record line {number} is not one JSON value ({exc}): {line[:120]!r}",
                retriable=True,
            ) from exc
    raise SourceError(f"{label}: JSON Lines body does not split into one JSON value per line", retriable=True)


def header_total(body: bytes, header: str, label: str) -> int:
    """The total in the response header ``header`` of a count answer (kept with its body, :class:`HeadedBody`): one
    non-negative decimal integer; missing, repeated with other values, or anything else fails for good."""
    values = {value.strip() for value in getattr(body, "headers", {}).get(header.lower(), ())}
    if not values:
        raise SourceError(
            f"{label}: the count answer has no {header} header; check source.total_header and count_path",
            retriable=False,
        )
    (value, *others) = sorted(values)
    if others or not value.isascii() or not value.isdigit() or len(value) > 18:
        shown = ", ".join(repr(v[:40]) for v in sorted(values)[:3])
        message = f"{label}: the total in header {header} is {shown}, not one non-negative integer"
        raise SourceError(message, retriable=False)
    return int(value)


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
