"""What the source hook does with a response's bytes: read a body within its size cap, quote the start of an error
body, read Retry-After, decode a page envelope in one pass, and map decoding problems to :class:`SourceError`."""

from __future__ import annotations

import email.utils
import functools
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import msgspec

from crawler_ops.errors import SourceError
from crawler_ops.records import Page, head_struct

# Of an error response, this much of the body is read (and inflated, if compressed); this much is quoted.
ERROR_BODY_BYTES = 1024
ERROR_EXCERPT_CHARS = 200


def json_path(document: Any, path: str) -> Any:
    """Follow a dotted path (``data.data``) through nested mappings; KeyError names the missing step."""
    node = document
    for step in path.split("."):
        if not isinstance(node, Mapping) or step not in node:
            raise KeyError(step)
        node = node[step]
    return node


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@functools.cache
def page_decoder(records_path: str, item: Any = msgspec.Raw) -> msgspec.json.Decoder[Any]:
    """Decodes a page envelope down to ``records_path`` in one pass, each record as ``item`` (raw JSON, or a
    struct of some of its fields).

    For ``data.data`` the type is ``{"data": {"data": [item, ...]}}``; other keys are skipped, and each
    level's value is reached through the attribute ``v``.
    """
    node: Any = list[item]
    for depth, step in enumerate(reversed(records_path.split("."))):
        node = msgspec.defstruct(f"PageLevel{depth}", [("v", node)], rename={"v": step})
    return msgspec.json.Decoder(node)


def unwrap(envelope: Any, records_path: str) -> Any:
    """The records list inside an envelope decoded by :func:`page_decoder`."""
    for _ in records_path.split("."):
        envelope = envelope.v
    return envelope


def error_excerpt(response: httpx.Response) -> str:
    """The start of an error response's body as text: at most ``ERROR_BODY_BYTES`` read from the wire, and a
    compressed body inflated only that far, so a hostile error body costs neither memory nor time."""
    if response.is_stream_consumed:  # a body in memory already (decoded): nothing more to read
        return response.content[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")
    raw = b""
    for part in response.iter_raw():
        raw += part
        if len(raw) >= ERROR_BODY_BYTES:
            break
    raw = raw[:ERROR_BODY_BYTES]
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "deflate"):
        try:  # wbits 47: a gzip or zlib header, detected
            raw = zlib.decompressobj(wbits=47).decompress(raw, ERROR_BODY_BYTES)
        except zlib.error:
            return f"({encoding} body that does not inflate)"
    elif encoding and encoding != "identity":
        return f"({encoding} body)"
    return raw[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")


def read_bounded(response: httpx.Response, max_bytes: int, label: str) -> bytes:
    """The body of ``response``; a body over ``max_bytes`` (declared or streamed) is an error, not retried."""
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise SourceError(f"{label}: response of {declared} bytes exceeds source.max_response_mb", retriable=False)
    chunks: list[bytes] = []
    size = 0
    for part in response.iter_bytes():
        size += len(part)
        if size > max_bytes:
            raise SourceError(f"{label}: response exceeds source.max_response_mb", retriable=False)
        chunks.append(part)
    return b"".join(chunks)


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


def decode_page(body: bytes, records_path: str, fields: tuple[str, ...]) -> Page:
    """The records of one page as raw JSON, one per record, with the values of ``fields`` of each. Two passes over
    the body: the records, then their ``fields`` only. Either pass skips what it does not keep, so both cost less
    than one full decode."""
    records = unwrap(page_decoder(records_path).decode(body), records_path)
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
