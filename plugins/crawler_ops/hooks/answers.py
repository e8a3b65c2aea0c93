"""One bounded read of an HTTP answer, for every client of the package (a source's pages, counts and tokens, the
schema registry, webhooks): what a server sends costs at most a size cap in memory, an inflation ratio in CPU, and
the caller's :func:`~crawler_ops.hooks.http.deadline` in time.

- :func:`read_bounded`: a whole body, inflated a piece at a time, refused once it passes its cap (declared or
  streamed) or inflates more than :data:`MAX_INFLATION` times its compressed size (a source's page: its cap alone);
- :func:`read_start`: the first bytes of a body, the rest left unread;
- :func:`error_excerpt`: the start of an error body as text, for a message.

httpx's own ``.read()``, ``.json()``, ``.text`` and ``.content`` read a whole body and inflate each piece whole (64 KiB
of a gzip bomb become 64 MiB at once): no client of the package calls them on a live answer.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Protocol

import httpx

from crawler_ops.errors import AnswerTooHeavyError, SourceError

#: Of an error answer, this much of the body is read (and inflated, if compressed); this much is quoted.
ERROR_BODY_BYTES = 1024
ERROR_EXCERPT_CHARS = 200
#: A compressed body is inflated at most this much at a time, so the size cap is checked before a bomb goes off.
INFLATE_PIECE = 64 * 1024
#: A compressed body may inflate to at most this many times its compressed size (JSON compresses 5-50 times; a
#: bomb over 1,000 times), once it has inflated past :data:`INFLATION_FLOOR`.
MAX_INFLATION = 200
INFLATION_FLOOR = 1024 * 1024


class Account(Protocol):
    """Where the bytes of a body are counted as they arrive (a chunk's memory budget)."""

    def take(self, size: int) -> None: ...

    def give(self, size: int) -> None: ...


def read_bounded(
    response: httpx.Response,
    max_bytes: int,
    label: str,
    what: str = "response",
    cap: str = "source.max_response_mb",
    account: Account | None = None,
    max_ratio: float | None = MAX_INFLATION,
) -> bytes:
    """The body of ``response``, inflated a piece at a time (:func:`inflated`); a body over ``max_bytes`` (declared or
    streamed), or inflating more than ``max_ratio`` times its compressed size, is an :class:`AnswerTooHeavyError`,
    not retriable. With ``account``, the body's bytes are taken from it as they arrive; the caller gives them back
    when it is done with the body.

    :param what: what the error calls the body; ``cap``: how it names the limit.
    :param max_ratio: None for a body whose cap alone bounds it (a source's page: ``source.max_response_mb`` and the
        chunk's memory budget; sources do send pages padded with whitespace).
    """
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise AnswerTooHeavyError(f"{label}: {what} of {declared} bytes exceeds {cap}", retriable=False)
    # The pieces joined once at the end: one copy of the body. Growing one buffer instead copied it twice (each
    # growth, then into bytes), 0.5-0.8 ms of CPU a page of 1.7 MB.
    parts: list[bytes] = []
    size = 0
    try:
        for part in inflated(response, label, max_ratio):
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


def read_start(response: httpx.Response, most: int) -> bytes:
    """The first ``most`` bytes of a body (inflated), the rest left unread."""
    start = bytearray()
    for part in inflated(response, "answer"):
        start += part
        if len(start) >= most:
            break
    return bytes(start[:most])


def error_excerpt(response: httpx.Response) -> str:
    """The start of an error answer's body as text: at most ``ERROR_BODY_BYTES`` read from the wire, and a
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


def inflated(response: httpx.Response, label: str, max_ratio: float | None = MAX_INFLATION) -> Iterator[bytes]:
    """The body's bytes, gzip and deflate undone here (as httpx would, layer by layer, skipping encodings it does not
    know) but never more than :data:`INFLATE_PIECE` bytes at a time: httpx inflates each read whole."""
    if response.is_stream_consumed:  # a body in memory already (a mock transport's): httpx decodes it
        return response.iter_bytes()
    parts: Iterator[bytes] = response.iter_raw()
    encodings = [e.strip().lower() for e in response.headers.get("content-encoding", "").split(",")]
    for encoding in reversed(encodings):
        if encoding in ("gzip", "x-gzip", "deflate"):
            parts = inflate(parts, label, max_ratio)
    return parts


def inflate(parts: Iterator[bytes], label: str, max_ratio: float | None) -> Iterator[bytes]:
    """One gzip or zlib layer (or raw deflate, as some servers send for ``deflate``), in bounded pieces; a layer that
    inflates past ``max_ratio`` times what it read is refused (not retriable)."""
    inflater = zlib.decompressobj(wbits=47)  # a gzip or zlib header, detected
    started = False
    taken = given = 0
    for part in parts:
        data = part
        taken += len(part)
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
            given += len(piece)
            if max_ratio is not None and given > INFLATION_FLOOR and given > max_ratio * taken:
                raise AnswerTooHeavyError(
                    f"{label}: compressed body inflates more than {max_ratio:g} times its size "
                    f"({taken} bytes read became {given}); refused as a compression bomb",
                    retriable=False,
                )
            if piece:
                yield piece
    tail = inflater.flush()
    if tail:
        yield tail
