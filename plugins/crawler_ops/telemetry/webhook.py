"""Signing crawler_ops webhooks, and verifying them on the receiving side.

This module needs only the standard library, so a receiver can copy it as it is. A delivery carries:

- ``X-Crawler-Ops-Delivery``: an id unique to the delivery; every retry of it carries the same id;
- ``X-Crawler-Ops-Timestamp``: when this attempt was signed, in Unix seconds;
- ``X-Crawler-Ops-Signature``: ``sha256=`` + the hex HMAC-SHA256, with the shared secret, of
  ``<delivery id>.<timestamp>.<raw body>``.

A receiver accepts a delivery when the signature matches, the timestamp lies within ``TOLERANCE_S`` of its own
clock, and it has not processed that delivery id before. Keeping the ids it processed for the tolerance window
is enough: an older copy fails the timestamp check.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

DELIVERY_HEADER = "X-Crawler-Ops-Delivery"
TIMESTAMP_HEADER = "X-Crawler-Ops-Timestamp"
SIGNATURE_HEADER = "X-Crawler-Ops-Signature"
EVENT_HEADER = "X-Crawler-Ops-Event"
TOLERANCE_S = 300


class InvalidWebhookError(ValueError):
    """A delivery that must not be processed; ``reason`` is one of ``missing header``, ``bad timestamp``,
    ``bad signature``, ``stale timestamp``.

    :param reason: the short reason, suitable for a metric or a 4xx answer
    :param detail: what exactly was wrong
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` in delivery ``delivery_id`` signed at ``timestamp``.

    :raises ValueError: for an empty secret.
    """
    require_secret(secret)
    message = f"{delivery_id}.{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, now: float | None = None, tolerance_s: float = TOLERANCE_S
) -> str:
    """Check a received delivery; return its delivery id (to de-duplicate on) or raise :class:`InvalidWebhookError`.

    :param secret: the shared secret (the webhook connection's password on the sending side)
    :param headers: the request headers; names are matched case-insensitively
    :param body: the raw request body, exactly as received
    :param now: the receiver's clock in Unix seconds (default: now)
    :param tolerance_s: how far the timestamp may lie from ``now``, either way
    :raises ValueError: for an empty secret, a receiver's configuration error rather than a bad delivery (it is not
        an :class:`InvalidWebhookError`, so a receiver does not answer it as one)
    """
    require_secret(secret)
    lowered = {name.lower(): value for name, value in headers.items()}
    values = {}
    for name in (DELIVERY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER):
        value = lowered.get(name.lower())
        if not value:
            raise InvalidWebhookError("missing header", f"no {name} header")
        values[name] = value
    delivery_id, timestamp = values[DELIVERY_HEADER], values[TIMESTAMP_HEADER]
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:  # Unix seconds until year 33658
        raise InvalidWebhookError("bad timestamp", f"{TIMESTAMP_HEADER} is not Unix seconds: {timestamp[:40]!r}")
    # Compare the signature before the clock: a stale timestamp then always means an authentic old copy.
    if not hmac.compare_digest(values[SIGNATURE_HEADER].encode(), sign(secret, delivery_id, timestamp, body).encode()):
        raise InvalidWebhookError("bad signature", "the signature does not match the body, delivery id and timestamp")
    skew = (time.time() if now is None else now) - int(timestamp)
    if abs(skew) > tolerance_s:
        raise InvalidWebhookError("stale timestamp", f"signed {skew:+.0f}s from now, more than {tolerance_s}s away")
    return delivery_id


def require_secret(secret: str | None) -> None:
    """Refuse an empty secret: an HMAC keyed with nothing is one anybody can compute, so a receiver whose secret is
    unset would accept any forged delivery."""
    if not secret:
        raise ValueError("empty webhook secret: set the shared secret (the webhook connection's password)")
