"""Deprecated alias of :mod:`crawler_ops.telemetry.webhook`, kept for webhook receivers that import ``verify`` from
here; import it from ``crawler_ops.telemetry.webhook`` instead."""

from __future__ import annotations

import warnings

from crawler_ops.telemetry.webhook import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE_S,
    InvalidWebhookError,
    sign,
    verify,
)

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "TOLERANCE_S",
    "InvalidWebhookError",
    "sign",
    "verify",
]

warnings.warn(
    "crawler_ops.webhook moved to crawler_ops.telemetry.webhook; import verify from there",
    DeprecationWarning,
    stacklevel=2,
)
