"""Unit tests of crawler_ops.telemetry.webhook (signing and verifying) and of a delivery end to end:
crawler_ops.telemetry.notify
posting to a real HTTP receiver on loopback that checks each request with ``verify()`` and de-duplicates
delivery ids, as the README tells receivers to."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler_ops import retry
from crawler_ops.config import NotifyConfig
from crawler_ops.telemetry import notify
from crawler_ops.telemetry.notify import notify_run
from crawler_ops.telemetry.webhook import InvalidWebhookError, sign, verify

NOW = 1_790_000_000
SECRET = "s3cret-秘密"


@given(st.text(min_size=1), st.text(min_size=1), st.text(alphabet="0123456789", min_size=1, max_size=12), st.binary())
def test_the_signature_is_the_hmac_of_delivery_timestamp_and_body(secret, delivery, timestamp, body):
    message = f"{delivery}.{timestamp}.".encode() + body
    expected = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()

    assert sign(secret, delivery, timestamp, body) == f"sha256={expected}"
    assert sign(secret, delivery, timestamp, body) != sign(secret + "x", delivery, timestamp, body)
    assert sign(secret, delivery, timestamp, body) != sign(secret, delivery + "x", timestamp, body)
    assert sign(secret, delivery, timestamp, body) != sign(secret, delivery, timestamp + "1", body)


def signed(body: bytes = b'{"event": "run.success"}', delivery: str = "d1", at: int | str = NOW) -> dict[str, str]:
    return {
        "X-Crawler-Ops-Delivery": delivery,
        "X-Crawler-Ops-Timestamp": str(at),
        "X-Crawler-Ops-Signature": sign(SECRET, delivery, str(at), body),
    }


@pytest.mark.parametrize("at", [NOW, NOW - 300, NOW + 300], ids=["now", "oldest-accepted", "newest-accepted"])
def test_a_signed_delivery_within_the_window_verifies_to_its_id(at):
    lowered = {k.lower(): v for k, v in signed(at=at).items()}

    assert verify(SECRET, lowered, b'{"event": "run.success"}', now=NOW) == "d1"


@pytest.mark.parametrize(
    ("headers", "body", "secret", "reason"),
    [
        ({**signed(), "X-Crawler-Ops-Delivery": ""}, None, SECRET, "missing header"),
        ({k: v for k, v in signed().items() if "Timestamp" not in k}, None, SECRET, "missing header"),
        ({k: v for k, v in signed().items() if "Signature" not in k}, None, SECRET, "missing header"),
        ({**signed(), "X-Crawler-Ops-Timestamp": "1e9"}, None, SECRET, "bad timestamp"),
        (signed(at="9" * 5000), None, SECRET, "bad timestamp"),
        (signed(), b'{"event": "run.failure"}', SECRET, "bad signature"),
        (signed(), None, "another secret", "bad signature"),
        ({**signed(), "X-Crawler-Ops-Delivery": "d2"}, None, SECRET, "bad signature"),
        ({**signed(at=NOW - 3600), "X-Crawler-Ops-Timestamp": str(NOW)}, None, SECRET, "bad signature"),
        (signed(at=NOW - 301), None, SECRET, "stale timestamp"),
        (signed(at=NOW + 301), None, SECRET, "stale timestamp"),
    ],
    ids=[
        "no-delivery-id",
        "no-timestamp",
        "no-signature",
        "timestamp-not-seconds",
        "signed-5000-digits",
        "tampered-body",
        "wrong-secret",
        "delivery-id-swapped",
        "timestamp-refreshed",
        "replayed-old",
        "from-the-future",
    ],
)
def test_a_delivery_that_must_not_be_processed_is_rejected_with_its_reason(headers, body, secret, reason):
    with pytest.raises(InvalidWebhookError, match=f"^{reason}: ") as caught:
        verify(secret, headers, body if body is not None else b'{"event": "run.success"}', now=NOW)

    assert caught.value.reason == reason


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({**signed(), "X-Crawler-Ops-Signature": ""}, "missing header: no X-Crawler-Ops-Signature header"),
        (
            {**signed(), "X-Crawler-Ops-Timestamp": "1" * 40 + "x and more"},
            f"bad timestamp: X-Crawler-Ops-Timestamp is not Unix seconds: '{'1' * 40}'",
        ),
        (
            {**signed(), "X-Crawler-Ops-Timestamp": "١٧٩٠"},
            "bad timestamp: X-Crawler-Ops-Timestamp is not Unix seconds: '١٧٩٠'",
        ),
        (
            {**signed(), "X-Crawler-Ops-Delivery": "d2"},
            "bad signature: the signature does not match the body, delivery id and timestamp",
        ),
        (signed(at=NOW - 301), "stale timestamp: signed +301s from now, more than 300s away"),
        (signed(at=NOW + 400), "stale timestamp: signed -400s from now, more than 300s away"),
    ],
    ids=["no-signature", "long-timestamp", "non-ascii-digits", "bad-signature", "old", "future"],
)
def test_a_rejected_delivery_says_exactly_what_was_wrong(headers, message):
    with pytest.raises(InvalidWebhookError) as caught:
        verify(SECRET, headers, b'{"event": "run.success"}', now=NOW)

    assert str(caught.value) == message


def test_without_a_clock_given_the_receiver_checks_the_timestamp_against_its_own(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: NOW + 0.4)
    assert verify(SECRET, signed(), b'{"event": "run.success"}') == "d1"
    monkeypatch.setattr(time, "time", lambda: NOW + 301.0)
    with pytest.raises(InvalidWebhookError, match=r"^stale timestamp: signed [+]301s from now"):
        verify(SECRET, signed(), b'{"event": "run.success"}')


def test_the_window_can_be_set_by_the_receiver():
    with pytest.raises(InvalidWebhookError, match="stale timestamp"):
        verify(SECRET, signed(at=NOW - 61), b'{"event": "run.success"}', now=NOW, tolerance_s=60)


# --------------------------------------------------------------------------- a real receiver on loopback


class VerifyingReceiver:
    """An HTTP receiver on loopback doing what the README asks of one: ``verify()`` every request (401 and the
    reason when it fails), then process each delivery id once (a repeat is answered 200 and not processed).
    ``answer`` scripts other answers; ``clock_offset_s`` moves its clock."""

    def __init__(self) -> None:
        self.processed: list[dict[str, Any]] = []
        self.seen: dict[str, float] = {}
        self.answers: list[tuple[int, dict[str, str]]] = []
        self.clock_offset_s = 0.0
        self.rejections: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status, headers, text = receiver.handle(dict(self.headers), body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.lock = threading.Lock()

    def handle(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        now = time.time() + self.clock_offset_s
        with self.lock:
            if self.answers:
                status, extra = self.answers.pop(0)
                return status, extra, b"busy"
            try:
                delivery = verify(SECRET, headers, body, now=now)
            except InvalidWebhookError as exc:
                self.rejections.append(exc.reason)
                return 401, {}, exc.reason.encode()
            self.seen = {d: t for d, t in self.seen.items() if now - t <= 300}
            if delivery in self.seen:
                return 200, {}, b"duplicate"
            self.seen[delivery] = now
            self.processed.append(json.loads(body))
            return 200, {}, b"ok"

    def replay(self, headers: dict[str, str], body: bytes) -> httpx.Response:
        return httpx.post(self.url, content=body, headers=headers, timeout=5)


@pytest.fixture
def loopback(airflow_connection: Callable[..., None]) -> Iterator[VerifyingReceiver]:
    receiver = VerifyingReceiver()
    airflow_connection("hook", conn_type="http", host=receiver.url, password=SECRET)
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, str], bytes]]:
    """Every request notify sends, as (headers, body), so a test can replay one."""
    sent: list[tuple[dict[str, str], bytes]] = []
    real_send = notify.send

    def send(client: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> Any:
        sent.append((dict(headers), body))
        return real_send(client, url, body, headers)

    monkeypatch.setattr(notify, "send", send)
    return sent


SUMMARY = {"run_id": "r1", "status": "success", "published": 3}


def test_a_delivery_is_verified_and_processed_once_and_a_replay_is_refused(loopback, captured):
    assert notify_run(NotifyConfig(conn_id="hook"), "jobs", "success", SUMMARY) is True
    (headers, body) = captured[0]

    again = loopback.replay(headers, body)
    loopback.clock_offset_s = 301
    late = loopback.replay(headers, body)
    tampered = loopback.replay(headers, body.replace(b'"published": 3', b'"published": 4'))

    assert loopback.processed == [{"event": "run.success", "task": "jobs", "summary": SUMMARY}]
    assert (again.status_code, again.text) == (200, "duplicate"), "within the window the delivery id is known"
    assert (late.status_code, late.text) == (401, "stale timestamp"), "after the window the timestamp is too old"
    assert (tampered.status_code, tampered.text) == (401, "bad signature")


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between tries, recorded instead of slept."""
    slept: list[float] = []
    clock = SimpleNamespace(time=time.time, monotonic=time.monotonic, sleep=slept.append)
    monkeypatch.setattr(notify, "time", clock)
    monkeypatch.setattr(retry, "full_jitter", lambda ceiling: ceiling)  # each wait at its ceiling, not below it
    return slept


def test_a_delivery_retried_after_a_5xx_is_processed_once(loopback, captured, pauses):
    loopback.answers = [(503, {"Retry-After": "1"})]

    assert notify_run(NotifyConfig(conn_id="hook"), "jobs", "failure", SUMMARY) is True

    assert len(captured) == 2 and len(loopback.processed) == 1
    assert captured[0][0]["X-Crawler-Ops-Delivery"] == captured[1][0]["X-Crawler-Ops-Delivery"]
    assert pauses == [1.0], "the receiver's Retry-After was waited before the second try"


def test_a_receiver_asking_to_retry_in_an_hour_does_not_stall_the_commit(loopback, captured, pauses):
    loopback.answers = [(429, {"Retry-After": "3600"})] * 3

    delivered = notify_run(NotifyConfig(conn_id="hook", max_wait_s=30), "jobs", "failure", SUMMARY)

    assert delivered is False and pauses == [], "no wait at all"
    assert len(captured) == 1, "a wait longer than max_wait_s gives the delivery up at once"
    assert loopback.processed == []


@pytest.mark.parametrize("secret", ["", None], ids=["empty", "none"])
def test_an_empty_secret_is_refused_for_verifying_and_for_signing(secret):
    # An HMAC with an empty key is one anybody can compute: a receiver with no secret configured must not accept.
    headers = {**signed(), "X-Crawler-Ops-Signature": sign_with_empty_key(b'{"event": "run.success"}')}

    with pytest.raises(ValueError) as verifying:
        verify(secret, headers, b'{"event": "run.success"}', now=NOW)
    with pytest.raises(ValueError) as signing:
        sign(secret, "d1", str(NOW), b"{}")
    refusal = "empty webhook secret: set the shared secret (the webhook connection's password)"
    assert str(verifying.value) == str(signing.value) == refusal, "it names the setting to fix"
    assert not isinstance(verifying.value, InvalidWebhookError), "a receiver's configuration error, not a bad delivery"


def sign_with_empty_key(body: bytes) -> str:
    message = f"d1.{NOW}.".encode() + body
    return "sha256=" + hmac.new(b"", message, hashlib.sha256).hexdigest()
