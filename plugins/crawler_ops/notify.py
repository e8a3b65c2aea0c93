"""Run notifications: a signed webhook with the run summary, sent when a crawl run succeeds or fails.

The URL and the secret come from an Airflow connection (``host`` = URL, ``password`` = HMAC secret). The
body is JSON; the ``X-Crawler-Ops-Signature`` header is ``sha256=`` + the hex HMAC-SHA256 of
``<timestamp>.<body>`` with the secret, the timestamp being the ``X-Crawler-Ops-Timestamp`` header (Unix
seconds), so a receiver can reject replays. Delivery problems are logged and never fail the crawl.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from airflow.sdk import BaseHook

from crawler_ops.config import NotifyConfig

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Crawler-Ops-Signature"
TIMESTAMP_HEADER = "X-Crawler-Ops-Timestamp"
EVENT_HEADER = "X-Crawler-Ops-Event"
ATTEMPTS = 3


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def webhook_url(conn: Any) -> str:
    """The connection's URL: ``host`` as a full URL, or built from schema (http/https), host, port, ``path`` extra."""
    host = (conn.host or "").strip()
    if host.startswith(("http://", "https://")):
        return host
    if not host:
        raise ValueError(f"connection '{conn.conn_id}' has no host; set it to the webhook URL")
    scheme = conn.schema or "https"
    port = f":{conn.port}" if conn.port else ""
    path = str(conn.extra_dejson.get("path", ""))
    return f"{scheme}://{host}{port}{path if not path or path.startswith('/') else '/' + path}"


def notify_run(cfg: NotifyConfig | None, task_id: str, outcome: str, summary: Mapping[str, Any]) -> bool:
    """POST the summary of a finished run (``outcome`` 'success' or 'failure') when configured for it.

    :return: True when the receiver answered 2xx; False when not configured, not wanted or not delivered.
    """
    if cfg is None or outcome not in cfg.on:
        return False
    try:
        conn = BaseHook.get_connection(cfg.conn_id)
        if not conn.password:
            log.error(
                "task %s: webhook connection '%s' has no password (the HMAC secret); not notified", task_id, cfg.conn_id
            )
            return False
        event = f"run.{outcome}"
        body = json.dumps(
            {"event": event, "task": task_id, "summary": dict(summary)}, ensure_ascii=False, default=str
        ).encode()
        return post_signed(webhook_url(conn), body, conn.password, event, cfg.timeout_s, task_id)
    except Exception as exc:  # noqa: BLE001 - a notification problem must never fail the crawl
        log.error(
            "task %s: webhook via connection '%s' not sent: %s: %s", task_id, cfg.conn_id, type(exc).__name__, exc
        )
        return False


def post_signed(url: str, body: bytes, secret: str, event: str, timeout_s: float, task_id: str) -> bool:
    """Up to ``ATTEMPTS`` tries (connection errors and 5xx), each signed with a fresh timestamp."""
    where = safe_target(url)
    for attempt in range(1, ATTEMPTS + 1):
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            EVENT_HEADER: event,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(secret, timestamp, body),
        }
        try:
            response = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if response.is_success:
                log.info("task %s: webhook %s delivered to %s (HTTP %d)", task_id, event, where, response.status_code)
                return True
            problem = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code < 500 and response.status_code != 429:
                break
        if attempt < ATTEMPTS:
            time.sleep(0.5 * attempt)
    log.error(
        "task %s: webhook %s to %s not delivered after %d attempt(s): %s", task_id, event, where, attempt, problem
    )
    return False


def safe_target(url: str) -> str:
    """Scheme and host of ``url`` for logs: paths and queries may carry tokens."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
