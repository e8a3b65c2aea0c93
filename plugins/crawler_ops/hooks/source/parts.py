"""A page too large (``source.max_response_mb``) or too slow (``source.deadline_s``) read in parts within its batch:
smaller requests for the same offsets, recursively down to one record, joined in order, so the batch's boundaries
and the watermark do not move. One record still too large or too slow fails as any request does."""

from __future__ import annotations

import logging
from collections.abc import Callable

from crawler_ops.errors import AnswerTooHeavyError, SourceError
from crawler_ops.hooks.source.paging import PageCall, Paging, join_pages
from crawler_ops.message.pages import Page

log = logging.getLogger(__name__)

#: Reads one request's records; the flag says whether a too heavy answer is given up at once (it has parts).
Read = Callable[[PageCall, bool], Page]


def too_heavy(exc: SourceError) -> bool:
    """Whether ``exc`` (or the error its retries gave up on) is an answer too large or past its deadline."""
    return isinstance(exc, AnswerTooHeavyError) or isinstance(exc.__cause__, AnswerTooHeavyError)


def read_in_parts(read: Read, paging: Paging, call: PageCall) -> Page:
    """The records ``call`` takes, read whole or, when its answer is too heavy, in parts (each read the same way)."""
    why_whole = paging.whole(call)
    try:
        return read(call, why_whole is None)
    except SourceError as exc:
        if not too_heavy(exc):
            raise
        if why_whole is not None:
            raise SourceError(f"{exc}; not read in parts: {why_whole}", retriable=exc.retriable) from exc
        split = paging.parts(call)
        log.warning("%s; reading it in %d parts: %s", exc, len(split), ", ".join(part.where for part in split))
    # Outside the handler: the error's traceback (and the body it was reading) is gone before the parts are read.
    return join_pages([read_in_parts(read, paging, part) for part in split])
