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
from typing import Any
from urllib.parse import urlsplit

import httpx
from airflow.sdk import BaseHook

from crawler_ops.config import NotifyConfig
from crawler_ops.hooks.answers import error_excerpt
from crawler_ops.hooks.http import DeadlineTransport, deadline, environment_proxy
from crawler_ops.retry import RetryPolicy, retry_after_seconds
from crawler_ops.telemetry.webhook import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

log = logging.getLogger(__name__)

ATTEMPTS = 3
#: The ceiling of the first retry's wait when the receiver asks for none (doubled for the second).
BACKOFF_S = 0.5
# A Retry-After asks for at most this many seconds; any ask longer than max_wait_s gives the delivery up anyway.
RETRY_AFTER_MAX_S = 86400.0


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


def delivery_limit_s(cfg: NotifyConfig) -> float:
    """The wall-clock limit of one delivery: every try's ``timeout_s`` plus ``max_wait_s`` of waiting between them
    (60 s by default). Connects, writes, reads and waits all end by it, so a receiver trickling its answer cannot
    hold the sender longer."""
    return ATTEMPTS * cfg.timeout_s + cfg.max_wait_s


class Undelivered(Exception):
    """One try of a delivery that did not get a 2xx: what was wrong, whether another try may pass, and the wait the
    receiver asked for."""

    def __init__(self, problem: str, retriable: bool, retry_after: float | None) -> None:
        super().__init__(problem)
        self.problem, self.retriable, self.retry_after = problem, retriable, retry_after


def post_signed(
    url: str, body: bytes, secret: str, event: str, timeout_s: float, task_id: str, max_wait_s: float
) -> bool:
    """One delivery: up to ``ATTEMPTS`` tries (connection errors, 429 and 5xx) under one delivery id, each
    signed with a fresh timestamp, all within ``ATTEMPTS * timeout_s + max_wait_s`` of wall-clock time.

    Between tries it waits what the receiver's ``Retry-After`` asks, else a short backoff (:class:`RetryPolicy`), but
    never more than ``max_wait_s`` in all nor past the delivery's limit: a receiver asking for longer is given up on
    at once, so the commit never stalls on it. An answer's body is read only when it is an error, and then only its
    start, for the log.
    """
    where = safe_target(url)
    delivery_id = uuid.uuid4().hex
    policy = RetryPolicy(ATTEMPTS - 1, BACKOFF_S, BACKOFF_S * 2**ATTEMPTS, RETRY_AFTER_MAX_S, max_wait_s)
    tries = 0

    def attempt(client: httpx.Client) -> int:
        nonlocal tries
        tries += 1
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            EVENT_HEADER: event,
            DELIVERY_HEADER: delivery_id,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(secret, delivery_id, timestamp, body),
        }
        status, problem, asked = send(client, url, body, headers)
        if status is not None and 200 <= status < 300:
            return status
        raise Undelivered(problem, status is None or status >= 500 or status == 429, asked)

    def gave_up(failure: Undelivered, _tries: int, why: str | None) -> Undelivered:
        return Undelivered(f"{failure.problem}; {why}" if why else failure.problem, False, None)

    try:
        with deadline(ATTEMPTS * timeout_s + max_wait_s) as end, open_client(url, timeout_s) as client:
            status = policy.run(
                lambda: attempt(client), Undelivered, give_up=gave_up, sleep=time.sleep, until=end, clock=time.monotonic
            )
    except Undelivered as failure:
        log.error(
            "task %s: webhook %s delivery %s to %s not delivered after %d attempt(s): %s",
            task_id,
            event,
            delivery_id,
            where,
            tries,
            failure.problem,
        )
        return False
    log.info("task %s: webhook %s delivery %s delivered to %s (HTTP %d)", task_id, event, delivery_id, where, status)
    return True


def open_client(url: str, timeout_s: float) -> httpx.Client:
    """A client whose every connect, write and read ends by the current :func:`deadline` (httpx's own timeouts
    bound each socket operation only); redirects are not followed, the environment's proxy is used."""
    transport = DeadlineTransport(
        verify=url.startswith("https://"), limits=httpx.Limits(max_connections=1), proxy=environment_proxy(url)
    )
    return httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=False)


def send(
    client: httpx.Client, url: str, body: bytes, headers: Mapping[str, str]
) -> tuple[int | None, str, float | None]:
    """POST once: the answer's status (None when there was none), what was wrong, and the ``Retry-After`` it asked
    for. A 2xx answer's body is not read at all; of an error's, at most ``ERROR_BODY_BYTES`` are read from the wire
    and a compressed one is inflated no further (:func:`~crawler_ops.hooks.answers.error_excerpt`)."""
    try:
        with client.stream("POST", url, content=body, headers=headers) as response:
            if response.is_success:
                return response.status_code, "", None
            try:
                excerpt = repr(error_excerpt(response))
            except httpx.HTTPError as exc:
                excerpt = f"({type(exc).__name__} reading the answer)"
            asked = retry_after_seconds(response.headers.get("Retry-After"), RETRY_AFTER_MAX_S)
            return response.status_code, f"HTTP {response.status_code}: {excerpt}", asked
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}", None


def safe_target(url: str) -> str:
    """Scheme and host of ``url`` for logs: paths and queries may carry tokens."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
