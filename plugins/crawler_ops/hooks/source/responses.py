"""What the source hook does with a response's bytes: read a body within its size cap, quote the start of an error
body, decode a page envelope in one pass, and map decoding problems to :class:`SourceError`."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import msgspec

from crawler_ops.errors import AnswerTooHeavyError, SourceError
from crawler_ops.hooks.source.budget import current_account
from crawler_ops.message.pages import Page, head_struct, json_path

if TYPE_CHECKING:
    pass

# Of an error response, this much of the body is read (and inflated, if compressed); this much is quoted.
ERROR_BODY_BYTES = 1024
ERROR_EXCERPT_CHARS = 200
#: A count answer is a few bytes; it is read to this size at most.
COUNT_BODY_BYTES = 64 * 1024
#: A compressed body is inflated at most this much at a time, so the size cap is checked before a bomb goes off.
INFLATE_PIECE = 64 * 1024


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


def read_bounded(
    response: httpx.Response, max_bytes: int, label: str, what: str = "response", cap: str = "source.max_response_mb"
) -> bytes:
    """The body of ``response``, inflated a piece at a time (:func:`inflated`); a body over ``max_bytes`` (declared or
    streamed) is an error, not retried. Inside a chunk's fetch, the body's bytes count against the chunk's memory
    budget (:mod:`crawler_ops.hooks.source.budget`) as they arrive; the caller's account keeps them until the page is
    done.

    :param what: what the error calls the body; ``cap``: how it names the limit.
    """
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise AnswerTooHeavyError(f"{label}: {what} of {declared} bytes exceeds {cap}", retriable=False)
    account = current_account()
    # The pieces joined once at the end: one copy of the body. Growing one buffer instead copied it twice (each
    # growth, then into bytes), 0.5-0.8 ms of CPU a page of 1.7 MB.
    parts: list[bytes] = []
    size = 0
    try:
        for part in inflated(response, label):
            if size + len(part) > max_bytes:
                raise AnswerTooHeavyError(f"{label}: {what} exceeds {cap}", retriable=False)
            if account is not None:
                account.take(len(part))
            parts.append(part)
            size += len(part)
        if account is None:
            return b"".join(parts)
        account.take(size)  # the joined copy: both exist for a moment
        body = b"".join(parts)
        parts.clear()
        account.give(size)
        return body
    except BaseException:
        parts.clear()  # the error's traceback keeps this frame: not its bytes
        if account is not None:
            account.give(size)
        raise


def read_start(response: httpx.Response, most: int = COUNT_BODY_BYTES) -> bytes:
    """The first ``most`` bytes of a body (inflated), the rest left unread: what rules read of an error answer."""
    start = bytearray()
    for part in inflated(response, "error answer"):
        start += part
        if len(start) >= most:
            break
    return bytes(start[:most])


def inflated(response: httpx.Response, label: str) -> Iterator[bytes]:
    """The body's bytes, gzip and deflate undone here (as httpx would, layer by layer, skipping encodings it does not
    know) but never more than :data:`INFLATE_PIECE` bytes at a time: httpx inflates each read whole, and 64 KiB of a
    gzip bomb become 64 MiB at once, before any cap is checked."""
    if response.is_stream_consumed:  # a body in memory already (a mock transport's): httpx decodes it
        return response.iter_bytes()
    parts: Iterator[bytes] = response.iter_raw()
    encodings = [e.strip().lower() for e in response.headers.get("content-encoding", "").split(",")]
    for encoding in reversed(encodings):
        if encoding in ("gzip", "x-gzip", "deflate"):
            parts = inflate(parts, label)
    return parts


def inflate(parts: Iterator[bytes], label: str) -> Iterator[bytes]:
    """One gzip or zlib layer (or raw deflate, as some servers send for ``deflate``), in bounded pieces."""
    inflater = zlib.decompressobj(wbits=47)  # a gzip or zlib header, detected
    started = False
    for part in parts:
        data = part
        while data and not inflater.eof:
            try:
                piece = inflater.decompress(data, INFLATE_PIECE)
            except zlib.error as exc:
                if started:
                    raise SourceError(f"{label}: compressed body does not inflate: {exc}", retriable=True) from exc
                inflater, started = zlib.decompressobj(wbits=-zlib.MAX_WBITS), True
                continue
            started = True
            data = inflater.unconsumed_tail
            if piece:
                yield piece
    tail = inflater.flush()
    if tail:
        yield tail


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
