"""Errors a source reports in the body of an HTTP 200, and pages too large or too slow unless asked smaller: the
``envelopes`` member of ``PUT /admin/tasks/{task}`` (per task, like ``paging`` and ``auth``).

Page requests (``/list``, ``/pages``, ``/search``) are counted per task; on the options below they answer:

* every ``rate_limited_every``-th: ``{"code": 42901, "msg": "rate limited", "data": {"retry_after": s}}``
* every ``busy_every``-th: ``{"code": 50301, "msg": "busy, try again"}``
* every ``expire_every``-th (an ``oauth2`` task): every access token issued so far is revoked, and the answer is
  ``{"code": 40101, "msg": "token expired"}``; with ``expired_in_body``, any request with an expired, revoked or
  unknown token gets that answer (HTTP 200) instead of a 401
* a page holding an offset of ``fail_offsets``: ``{"code": 40001, "msg": "permanent error"}``
* a page holding an offset of ``skip_offsets``: ``{"code": 20401, "msg": "page withheld"}``
* a page of more than ``large_over`` records: ``large_kb`` KiB of padding (too large for a small
  ``max_response_mb``); of more than ``slow_over`` records: the page, after ``slow_ms``.

``GET /admin/tasks/{task}`` lists, under ``envelopes``, how many of each code were answered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

RATE_LIMITED, BUSY, EXPIRED, FAILED, WITHHELD = 42901, 50301, 40101, 40001, 20401


class EnvelopeOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The ``envelopes`` member of ``PUT /admin/tasks/{task}``; 0 or empty: off."""

    rate_limited_every: int = 0
    retry_after_s: float = 1.0
    busy_every: int = 0
    expire_every: int = 0
    expired_in_body: bool = False
    fail_offsets: list[int] = msgspec.field(default_factory=list)
    skip_offsets: list[int] = msgspec.field(default_factory=list)
    large_over: int = 0
    large_kb: int = 2048
    slow_over: int = 0
    slow_ms: int = 0


def envelope(code: int, msg: str, **data: object) -> bytes:
    return msgspec.json.encode({"code": code, "msg": msg, **({"data": data} if data else {})})


class Revocable(Protocol):
    """What an ``expire_every`` answer needs of the task's auth (:class:`demo_source.auth.AuthState`)."""

    def revoke(self) -> int: ...


@dataclass
class Envelopes:
    """One task's envelope options, its count of page requests, and the codes answered so far."""

    options: EnvelopeOptions = field(default_factory=EnvelopeOptions)
    seq: int = 0
    answered: dict[str, int] = field(default_factory=dict)

    def every(self, n: int) -> bool:
        return n > 0 and self.seq % n == 0

    def count(self, code: int | str) -> None:
        self.answered[str(code)] = self.answered.get(str(code), 0) + 1

    def expired(self) -> bytes | None:
        """The answer to a request with an expired or unknown token, when the task reports it in the body."""
        if not self.options.expired_in_body:
            return None
        self.count(EXPIRED)
        return envelope(EXPIRED, "token expired")

    async def answer(self, offset: int, limit: int, auth: Revocable | None) -> bytes | None:
        """The body of a page request of ``[offset, offset + limit)`` when an option answers it (None: the page)."""
        options = self.options
        self.seq += 1
        code: int | None = None
        if self.every(options.rate_limited_every):
            code, body = RATE_LIMITED, envelope(RATE_LIMITED, "rate limited", retry_after=options.retry_after_s)
        elif self.every(options.busy_every):
            code, body = BUSY, envelope(BUSY, "busy, try again")
        elif self.every(options.expire_every) and auth is not None:
            auth.revoke()
            self.count("revoked")
            code, body = EXPIRED, envelope(EXPIRED, "token expired")
        elif any(offset <= o < offset + limit for o in options.fail_offsets):
            code, body = FAILED, envelope(FAILED, "permanent error")
        elif any(offset <= o < offset + limit for o in options.skip_offsets):
            code, body = WITHHELD, envelope(WITHHELD, "page withheld")
        elif options.large_over and limit > options.large_over:
            self.count("large")
            return b'{"code":0,"pad":"' + b" " * (options.large_kb * 1024) + b'"}'
        if code is not None:
            self.count(code)
            return body
        if options.slow_over and limit > options.slow_over:
            self.count("slow")
            await asyncio.sleep(options.slow_ms / 1000)
        return None
