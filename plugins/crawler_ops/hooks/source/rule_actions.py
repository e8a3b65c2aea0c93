"""What the source hook does when an answer matched a rule of ``source.responses``
(:mod:`crawler_ops.hooks.source.rules`): each action ends the request with the :class:`SourceError` that makes the
hook's retry loop, the chunk or the run do the right thing.

- ``rate_limited``: every worker on the connection slows down (the shared limiter's ``throttle``, as for a 429, with
  the envelope's wait), then the request is retried after that wait.
- ``refresh_auth``: :class:`TokenExpiredError`; the hook renews the shared token (:func:`renew_token`) and retries,
  once.
- ``retry``: retriable, with the hook's backoff; ``fail``: not retriable, with the rule's message.
- ``skip``: :class:`PageSkippedError`; the chunk records the batch done with one dead letter naming the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import msgspec

from crawler_ops.config import SourceConfig
from crawler_ops.errors import PageSkippedError, SourceError, TokenExpiredError
from crawler_ops.hooks.source.auth import OAuth2Auth, redact
from crawler_ops.hooks.source.rules import Verdict, first_match

if TYPE_CHECKING:
    from crawler_ops.hooks.source.ratelimit import SourceLimiter

#: This much of a matched answer is quoted in errors and logs.
EXCERPT_CHARS = 200
#: A skipped page's body is stored with its dead letter when it is this small; else its start, as text.
ENVELOPE_BYTES = 64 * 1024


def excerpt(body: bytes) -> str:
    return redact(body[:EXCERPT_CHARS].decode("utf-8", "replace"))


def envelope_of(body: bytes) -> Any:
    """What a skipped page's dead letter keeps of its answer: the decoded body, or the start of a large one."""
    if len(body) <= ENVELOPE_BYTES:
        try:
            return msgspec.json.decode(redact(body.decode("utf-8", "replace")))
        except (msgspec.DecodeError, RecursionError):
            pass
    return {"truncated": True, "text": excerpt(body)}


def act(
    verdict: Verdict, label: str, body: bytes, authorization: str | None, limiter: SourceLimiter | None
) -> NoReturn:
    """End a request whose answer (``body``) matched ``verdict``'s rule; ``label`` names the task, the request and
    its offsets, ``authorization`` the header the request carried, ``limiter`` the connection's shared limiter."""
    rule, name = verdict.rule, verdict.name
    seen = f"{label}: {name} matched ({verdict.action}): {excerpt(body)!r}"
    match rule.action:
        case "rate_limited":
            if limiter is not None:
                limiter.throttle(verdict.wait_s)
            raise SourceError(seen, retriable=True, retry_after=verdict.wait_s)
        case "refresh_auth":
            raise TokenExpiredError(seen, authorization)
        case "retry":
            raise SourceError(seen, retriable=True)
        case "fail":
            raise SourceError(f"{label}: {rule.message} ({name}: {excerpt(body)!r})", retriable=False)
        case "skip":
            raise PageSkippedError(seen, envelope_of(body))


def check_answer(
    response: httpx.Response, body: bytes, label: str, source: SourceConfig, limiter: SourceLimiter | None
) -> None:
    """End the request as the first rule of ``source.responses`` the answer (``response``'s status, ``body``)
    matches says (:func:`act`); nothing when none does."""
    verdict = first_match(source.responses, body, response.status_code, source.max_retry_after_s)
    if verdict is not None:
        act(verdict, label, body, response.request.headers.get("authorization"), limiter)


def renew_token(auth: httpx.Auth | None, expired: TokenExpiredError, renewed: bool) -> None:
    """Renew the shared token after ``expired`` (unless another worker already did); a second expiry within one
    request (``renewed``), or an auth without a token to renew, fails the request for good."""
    if renewed:
        raise SourceError(f"{expired}; the token was renewed once for this request already", retriable=False)
    if not isinstance(auth, OAuth2Auth):
        raise SourceError(
            f"{expired}; source.auth has no token to renew (refresh_auth needs type oauth2_client_credentials or "
            "oauth2_refresh_token)",
            retriable=False,
        )
    auth.renew(expired.authorization)
