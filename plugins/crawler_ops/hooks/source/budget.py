"""A chunk's memory budget for response bodies, shared by its fetch threads.

``source.max_response_mb`` caps one body; a chunk reads ``concurrency`` pages ahead, and a page's messages keep slices
of its body until Kafka confirmed them, so without a shared bound a chunk could hold ``concurrency`` times the cap (and
twice that while bodies are joined). A :class:`ByteBudget` counts the bytes of the bodies a chunk holds, as they arrive
(inflated, see :func:`crawler_ops.hooks.answers.read_bounded`), from the first byte until the page's batch is
done.

The rule: the page the chunk's thread needs next (the oldest one not yet filtered, *the head*) may always read; every
other page reads only while all bodies together stay within ``limit - 3 x cap``, the room kept for the head (its body
and, for an instant, the copy its pieces are joined into) and for the batch being sent. So the bodies held never exceed
``max(limit, 3 x cap)``, and the chunk never stalls: the head is never kept waiting, and once the chunk's thread is
done with it, the next page becomes the head. A page kept waiting past its request's deadline fails as a timeout
(retriable), like a source that stopped sending.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpx

from crawler_ops.config import SourceConfig
from crawler_ops.hooks.http import bounded

_ACCOUNT: ContextVar[PageAccount | None] = ContextVar("crawler_ops_page_account", default=None)


class ByteBudget:
    """The bytes of response bodies one chunk holds at once.

    :param limit: bytes all held bodies may take together (``source.chunk_memory_mb``).
    :param cap: bytes one body may take (``source.max_response_mb``).
    """

    def __init__(self, limit: int, cap: int) -> None:
        self.limit, self.cap = limit, cap
        self.used = 0
        self.peak = 0
        self._open: set[int] = set()
        self._seq = itertools.count()
        self._closed = False
        self._cond = threading.Condition()

    @classmethod
    def for_source(cls, source: SourceConfig) -> ByteBudget:
        """The budget of one chunk of a task reading ``source``: ``chunk_memory_mb``, by default four responses of
        ``max_response_mb``."""
        mib = 1024 * 1024
        budget = source.chunk_memory_mb or 4 * source.max_response_mb
        return cls(int(budget * mib), int(source.max_response_mb * mib))

    def __enter__(self) -> ByteBudget:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def account(self) -> PageAccount:
        """An account for the next page, in the order the chunk's thread will take the pages."""
        with self._cond:
            account = PageAccount(self, next(self._seq))
            self._open.add(account.seq)
            return account

    def close(self) -> None:
        """The chunk is over: pages still waiting fail at once rather than at their deadlines."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def take(self, account: PageAccount, size: int) -> None:
        """Count ``size`` more bytes for ``account``, waiting while the budget has no room for a page behind the
        head; a wait past the request's deadline raises :class:`httpx.ReadTimeout`."""
        with self._cond:
            while not (account.seq == min(self._open) or self.used + size <= self.limit - 3 * self.cap):
                if self._closed:
                    raise httpx.ReadTimeout("the chunk ended while this page waited for its memory budget")
                self._cond.wait(bounded(None, httpx.ReadTimeout))
            self.used += size
            account.held += size
            self.peak = max(self.peak, self.used)

    def give(self, account: PageAccount, size: int) -> None:
        with self._cond:
            self.used -= size
            account.held -= size
            self._cond.notify_all()

    def filtered(self, account: PageAccount) -> None:
        """The chunk's thread is done reading the page: the next one becomes the head (the bytes stay held)."""
        with self._cond:
            self._open.discard(account.seq)
            self._cond.notify_all()

    def release(self, account: PageAccount) -> None:
        with self._cond:
            self.used -= account.held
            account.held = 0
            self._open.discard(account.seq)
            self._cond.notify_all()


class PageAccount:
    """The bytes one page's body holds of a :class:`ByteBudget`; released once its chunk's thread is done with it."""

    def __init__(self, budget: ByteBudget, seq: int) -> None:
        self.budget, self.seq = budget, seq
        self.held = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Bodies read by this thread inside the block count against this account."""
        token = _ACCOUNT.set(self)
        try:
            yield
        finally:
            _ACCOUNT.reset(token)

    def take(self, size: int) -> None:
        self.budget.take(self, size)

    def give(self, size: int) -> None:
        self.budget.give(self, size)

    def filtered(self) -> None:
        self.budget.filtered(self)

    def release(self) -> None:
        self.budget.release(self)


def current_account() -> PageAccount | None:
    """The account the current thread's reads count against (None outside a chunk's fetch)."""
    return _ACCOUNT.get()
