"""Unit tests of crawler_ops.telemetry.notify: the URL from the connection, and what is sent when (the signature and its
verification are in test_webhook.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from crawler_ops import retry
from crawler_ops.config import NotifyConfig
from crawler_ops.telemetry import notify
from crawler_ops.telemetry.notify import RETRY_AFTER_MAX_S, notify_run, webhook_url
from crawler_ops.telemetry.webhook import verify


def conn(**fields: object) -> SimpleNamespace:
    base = {"conn_id": "hook", "host": None, "schema": None, "port": None, "extra_dejson": {}}
    return SimpleNamespace(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"host": "https://hooks.example.com/crawl?x=1"}, "https://hooks.example.com/crawl?x=1"),
        ({"host": "hooks.example.com"}, "https://hooks.example.com"),
        (
            {"host": "127.0.0.1", "schema": "http", "port": 8080, "extra_dejson": {"path": "in"}},
            "http://127.0.0.1:8080/in",
        ),
        ({"host": "h", "extra_dejson": {"path": "/a/b"}}, "https://h/a/b"),
    ],
)
def test_the_webhook_url_comes_from_the_connection(fields, url):
    assert webhook_url(conn(**fields)) == url


def test_a_connection_without_host_is_rejected_by_name():
    with pytest.raises(ValueError, match="connection 'hook' has no host"):
        webhook_url(conn())


# --------------------------------------------------------------------------- what is sent when


@dataclass
class FakeReceiver:
    """Stands in for the webhook's HTTP client in crawler_ops.telemetry.notify: answers from a script, keeps every
    request (the headers as sent, the read timeout)."""

    statuses: list[int | Exception] = field(default_factory=lambda: [200])
    retry_after: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        headers = {name.decode(): value.decode() for name, value in request.headers.raw}
        timeout = request.extensions["timeout"]["read"]
        self.requests.append({"url": str(request.url), "body": request.content, "headers": headers, "timeout": timeout})
        answer = self.statuses[min(len(self.requests), len(self.statuses)) - 1]
        if isinstance(answer, Exception):
            raise answer
        extra = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
        return httpx.Response(answer, headers=extra, request=request)

    def client(self, url: str, timeout_s: float) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handle), timeout=timeout_s)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> FakeReceiver:
    fake = FakeReceiver()
    monkeypatch.setattr(notify, "open_client", fake.client)
    return fake


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []
    clock = SimpleNamespace(time=lambda: 1_790_000_000.5, sleep=waited.append, monotonic=time.monotonic)
    monkeypatch.setattr(notify, "time", clock)
    monkeypatch.setattr(retry, "full_jitter", lambda ceiling: ceiling)  # each wait at its ceiling, not below it
    return waited


@pytest.fixture
def webhook_conn(airflow_connection: Callable[..., None]) -> Callable[..., None]:
    """The webhook connection ``hook``; call it to redefine the connection's fields."""

    def define(**fields: Any) -> None:
        airflow_connection("hook", conn_type="http", **fields)

    define(host="https://hooks.test/in", password="s3cret")
    return define


SUMMARY = {"run_id": "r1", "status": "success", "published": 3}


def test_a_run_summary_is_posted_signed_with_the_connection_secret(receiver, sleeps, webhook_conn):
    assert notify_run(NotifyConfig(conn_id="hook", timeout_s=4), "jobs", "success", SUMMARY) is True

    (request,) = receiver.requests
    assert request["url"] == "https://hooks.test/in" and request["timeout"] == 4
    headers = request["headers"]
    assert headers["X-Crawler-Ops-Timestamp"] == "1790000000"
    assert verify("s3cret", headers, request["body"], now=1_790_000_000) == headers["X-Crawler-Ops-Delivery"]
    assert len(headers["X-Crawler-Ops-Delivery"]) == 32
    assert headers["X-Crawler-Ops-Event"] == "run.success"
    assert json.loads(request["body"]) == {"event": "run.success", "task": "jobs", "summary": SUMMARY}


@pytest.mark.parametrize(
    ("on", "outcome"),
    [(("failure",), "success"), (("success",), "failure")],
    ids=["success-unwanted", "failure-unwanted"],
)
def test_an_outcome_not_listed_in_on_is_not_sent(receiver, sleeps, webhook_conn, on, outcome):
    assert notify_run(NotifyConfig(conn_id="hook", on=on), "jobs", outcome, SUMMARY) is False
    assert receiver.requests == []


@pytest.mark.parametrize("password", [None, ""], ids=["no-password", "empty-password"])
def test_nothing_is_sent_without_a_secret(receiver, sleeps, webhook_conn, password):
    webhook_conn(host="https://hooks.test/in", password=password)

    assert notify_run(NotifyConfig(conn_id="hook"), "jobs", "failure", SUMMARY) is False
    assert receiver.requests == []


def test_no_notify_config_sends_nothing(receiver, sleeps, webhook_conn):
    assert notify_run(None, "jobs", "failure", SUMMARY) is False
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("statuses", "attempts", "delivered"),
    [
        ([400], 1, False),
        ([404], 1, False),
        ([429, 429, 429], 3, False),
        ([429, 200], 2, True),
        ([500, 503, 502], 3, False),
        ([502, 200], 2, True),
        ([httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), 200], 3, True),
    ],
    ids=["400-not-retried", "404-not-retried", "429-retried", "429-then-ok", "5xx-retried", "5xx-then-ok", "io-errors"],
)
def test_a_4xx_is_not_retried_while_429_5xx_and_io_errors_are(
    receiver, sleeps, webhook_conn, statuses, attempts, delivered
):
    receiver.statuses = statuses

    assert notify_run(NotifyConfig(conn_id="hook"), "jobs", "failure", SUMMARY) is delivered

    assert len(receiver.requests) == attempts
    assert sleeps == [0.5 * n for n in range(1, attempts)]


def test_a_connection_that_cannot_be_read_does_not_raise(receiver, sleeps):
    assert notify_run(NotifyConfig(conn_id="no_such_conn"), "jobs", "failure", SUMMARY) is False
    assert receiver.requests == []


def test_the_retries_of_one_delivery_keep_its_id_and_another_delivery_gets_a_new_one(receiver, sleeps, webhook_conn):
    receiver.statuses = [503, 503, 200]

    assert notify_run(NotifyConfig(conn_id="hook"), "jobs", "failure", SUMMARY) is True
    assert notify_run(NotifyConfig(conn_id="hook"), "jobs", "failure", SUMMARY) is True

    ids = [r["headers"]["X-Crawler-Ops-Delivery"] for r in receiver.requests]
    assert len(ids) == 4 and ids[0] == ids[1] == ids[2] != ids[3]
    for request in receiver.requests:
        assert verify("s3cret", request["headers"], request["body"], now=1_790_000_000)


@pytest.mark.parametrize(
    ("retry_after", "max_wait_s", "attempts", "waits"),
    [
        ("2", 30, 3, [2.0, 2.0]),
        ("3600", 30, 1, []),
        ("20", 30, 2, [20.0]),
        ("1", 0, 1, []),
        ("soon", 30, 3, [0.5, 1.0]),
    ],
    ids=["honoured", "longer-than-the-cap", "cap-reached-on-the-second-wait", "no-waiting-allowed", "unreadable"],
)
def test_waiting_on_retry_after_is_capped_per_delivery(
    receiver, sleeps, webhook_conn, retry_after, max_wait_s, attempts, waits
):
    receiver.statuses = [429]
    receiver.retry_after = retry_after

    assert notify_run(NotifyConfig(conn_id="hook", max_wait_s=max_wait_s), "jobs", "failure", SUMMARY) is False

    assert len(receiver.requests) == attempts
    assert sleeps == waits and sum(sleeps) <= max_wait_s


def retry_after_s(value: str | None) -> float | None:
    """A receiver's Retry-After as a delivery reads it."""
    return retry.retry_after_seconds(value, RETRY_AFTER_MAX_S)


def test_retry_after_may_be_an_http_date(monkeypatch):
    monkeypatch.setattr(retry, "time", SimpleNamespace(time=lambda: 1_445_412_470.0))

    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 10.0
    assert retry_after_s("Wed, 21 Oct 2015 07:27:00 GMT") == 0.0, "a date in the past: no wait"
    assert retry_after_s(" 7 ") == 7.0
    assert retry_after_s(None) is None and retry_after_s("-3") == 0.0, "a negative ask: no wait"
