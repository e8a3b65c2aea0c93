"""A page too large (``source.max_response_mb``) or too slow (``source.deadline_s``) read in parts within its batch:
smaller requests for the same offsets, recursively down to one record, joined in order, so the batch's boundaries
and the watermark do not move. One record still too large or too slow fails as any request does.

A source decides how often a page must be split, so the parts of one page have a budget (:class:`PartsBudget`):
at most ``source.max_part_requests`` requests (a part's retries included) within ``source.parts_budget_s``; past
either, the page fails, retriable, naming both."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from crawler_ops.errors import AnswerTooHeavyError, SourceError
from crawler_ops.hooks.http import deadline
from crawler_ops.hooks.source.paging import PageCall, Paging, join_pages
from crawler_ops.message.pages import Page

log = logging.getLogger(__name__)

#: Reads one request's records; the flag says whether a too heavy answer is given up at once (it has parts).
Read = Callable[[PageCall, bool], Page]


def too_heavy(exc: SourceError) -> bool:
    """Whether ``exc`` (or the error its retries gave up on) is an answer too large or past its deadline."""
    return isinstance(exc, AnswerTooHeavyError) or isinstance(exc.__cause__, AnswerTooHeavyError)


@dataclass
class PartsBudget:
    """What reading one page in parts may spend: ``requests`` requests within ``seconds`` of the first split."""

    requests: int
    seconds: float
    end: float | None = None
    spent: int = 0

    def take(self, call: PageCall, first: SourceError) -> None:
        """One more request for ``call`` (the first starts the clock); a :class:`SourceError` naming ``first``, the
        whole read's failure, once the budget is spent."""
        if self.end is None:
            self.end = time.monotonic() + self.seconds
        if self.spent < self.requests and time.monotonic() < self.end:
            self.spent += 1
            return
        raise SourceError(
            f"{first}; read in parts, it took {self.spent} requests in {self.seconds - self.left():.0f}s without "
            f"finishing ({call.where} was next): past source.max_part_requests ({self.requests}) or "
            f"source.parts_budget_s ({self.seconds:g}s); the source is too slow or its records too large, retried "
            "later",
            retriable=True,
        )

    def left(self) -> float:
        return self.seconds if self.end is None else max(0.0, self.end - time.monotonic())


def read_in_parts(read: Read, paging: Paging, call: PageCall, budget: PartsBudget) -> Page:
    """The records ``call`` takes, read whole or, when its answer is too heavy, in parts (each read the same way),
    within ``budget``."""
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
        first = exc
    # Outside the handler: the error's traceback (and the body it was reading) is gone before the parts are read.
    pages = []
    for part in split:
        budget.take(part, first)
        with deadline(budget.left()):
            pages.append(read_in_parts(read, paging, part, budget))
    return join_pages(pages)
