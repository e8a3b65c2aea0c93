"""Run notifications: a signed webhook with the run summary, sent when a crawl run succeeds or fails.

The URL and the secret come from an Airflow connection (``host`` = URL, ``password`` = HMAC secret). The body is
JSON, signed together with a delivery id and a timestamp as :mod:`crawler_ops.telemetry.webhook` describes;
receivers check it with :func:`crawler_ops.telemetry.webhook.verify`. Delivery problems are logged and never fail
the crawl."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from airflow.sdk import BaseHook

from crawler_ops.config import NotifyConfig
from crawler_ops.telemetry.webhook import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

log = logging.getLogger(__name__)

ATTEMPTS = 3


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
    """POST the summary of a finished run (``outcome`` 'success' or 'failure'), or the plan of a run that started
    ('started'), when configured for it.

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
        return post_signed(webhook_url(conn), body, conn.password, event, cfg.timeout_s, task_id, cfg.max_wait_s)
    except Exception as exc:  # noqa: BLE001 - a notification problem must never fail the crawl
        log.error(
            "task %s: webhook via connection '%s' not sent: %s: %s", task_id, cfg.conn_id, type(exc).__name__, exc
        )
        return False


def post_signed(
    url: str, body: bytes, secret: str, event: str, timeout_s: float, task_id: str, max_wait_s: float
) -> bool:
    """One delivery: up to ``ATTEMPTS`` tries (connection errors, 429 and 5xx) under one delivery id, each
    signed with a fresh timestamp.

    Between tries it waits what the receiver's ``Retry-After`` asks, else a short backoff, but never more than
    ``max_wait_s`` in all: a receiver asking for longer is given up on at once, so the commit never stalls on it.
    """
    where = safe_target(url)
    delivery_id = uuid.uuid4().hex
    waited = 0.0
    for attempt in range(1, ATTEMPTS + 1):
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            EVENT_HEADER: event,
            DELIVERY_HEADER: delivery_id,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(secret, delivery_id, timestamp, body),
        }
        asked: float | None = None
        try:
            response = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if response.is_success:
                log.info(
                    "task %s: webhook %s delivery %s delivered to %s (HTTP %d)",
                    task_id,
                    event,
                    delivery_id,
                    where,
                    response.status_code,
                )
                return True
            problem = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code < 500 and response.status_code != 429:
                break
            asked = retry_after_s(response.headers.get("Retry-After"))
        if attempt == ATTEMPTS:
            break
        pause = 0.5 * attempt if asked is None else asked
        if waited + pause > max_wait_s:
            problem += f"; it asked to wait {pause:.0f}s, more than the {max_wait_s - waited:.0f}s left of max_wait_s"
            break
        time.sleep(pause)
        waited += pause
    log.error(
        "task %s: webhook %s delivery %s to %s not delivered after %d attempt(s): %s",
        task_id,
        event,
        delivery_id,
        where,
        attempt,
        problem,
    )
    return False


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def safe_target(url: str) -> str:
    """Scheme and host of ``url`` for logs: paths and queries may carry tokens."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
