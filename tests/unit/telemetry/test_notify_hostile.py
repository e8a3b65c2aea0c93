"""Unit tests of crawler_ops.telemetry.notify against hostile webhook receivers on loopback: an answer that inflates
to gigabytes, an answer trickled a byte at a time, an absurd ``Retry-After``. A delivery reads at most a few KiB of
an answer and ends within its wall-clock limit, whatever the receiver does (issue 27, item 2)."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from crawler_ops.config import NotifyConfig
from crawler_ops.retry import retry_after_seconds
from crawler_ops.telemetry import notify
from crawler_ops.telemetry.notify import delivery_limit_s, notify_run

SUMMARY = {"run_id": "r1", "status": "success", "published": 3}
INFLATED_BYTES = 64 * 1024 * 1024


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """64 MiB of spaces, gzipped to about 64 KiB."""
    return gzip.compress(b" " * INFLATED_BYTES, compresslevel=9)


class RawReceiver:
    """A loopback TCP server answering every request with ``answer(connection)``, which writes raw HTTP;
    ``finished`` counts the answers written to their end."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self.answer = answer
        self.requests = 0
        self.finished = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hooks"
        self.stopped = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(connection,), daemon=True).start()

    def handle(self, connection: socket.socket) -> None:
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            while len(body) < length:
                body += connection.recv(65536)
            self.requests += 1
            with contextlib.suppress(OSError):  # the sender hung up: what a bounded sender does
                self.answer(connection)
                self.finished += 1

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


@pytest.fixture
def raw_receiver(airflow_connection: Callable[..., None]) -> Iterator[Callable[..., RawReceiver]]:
    made: list[RawReceiver] = []

    def make(answer: Callable[[socket.socket], None]) -> RawReceiver:
        receiver = RawReceiver(answer)
        airflow_connection("hook", conn_type="http", host=receiver.url, password="s3cret")
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()


def gzip_answer(status: str, body: bytes) -> Callable[[socket.socket], None]:
    def answer(connection: socket.socket) -> None:
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        connection.sendall(head.encode() + body)

    return answer


@pytest.mark.parametrize("status", ["500 Internal Server Error", "200 OK"], ids=["error-answer", "success-answer"])
def test_a_gzip_bomb_answer_is_not_inflated(raw_receiver, gzip_bomb, status):
    receiver = raw_receiver(gzip_answer(status, gzip_bomb))
    cfg = NotifyConfig(conn_id="hook", timeout_s=5, max_wait_s=0)

    tracemalloc.start()
    try:
        delivered = notify_run(cfg, "jobs", "failure", SUMMARY)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert delivered is status.startswith("200")
    assert receiver.requests >= 1
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes: the answer was inflated"


def trickle(status: str, seconds: float) -> Callable[[socket.socket], None]:
    """Headers at once, then a body of one byte every 0.1 s for ``seconds``."""

    def answer(connection: socket.socket) -> None:
        count = int(seconds / 0.1)
        connection.sendall(f"HTTP/1.1 {status}\r\nContent-Length: {count}\r\n\r\n".encode())
        for _ in range(count):
            connection.sendall(b"x")
            time.sleep(0.1)

    return answer


def trickle_headers(seconds: float) -> Callable[[socket.socket], None]:
    """The status line and then one header byte every 0.1 s for ``seconds``."""

    def answer(connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        for _ in range(int(seconds / 0.1)):
            connection.sendall(b"x")
            time.sleep(0.1)

    return answer


@pytest.mark.parametrize(
    "answer",
    [trickle("503 Service Unavailable", 30), trickle("200 OK", 30), trickle_headers(30)],
    ids=["error-body", "success-body", "headers"],
)
def test_a_trickling_receiver_cannot_hold_the_delivery_past_its_limit(raw_receiver, answer):
    receiver = raw_receiver(answer)
    cfg = NotifyConfig(conn_id="hook", timeout_s=0.4, max_wait_s=0.3)

    notify_run(cfg, "jobs", "failure", SUMMARY)

    assert delivery_limit_s(cfg) == pytest.approx(1.5)
    assert receiver.requests >= 1
    assert receiver.finished == 0, "the delivery ended before the receiver's 30 s answer did"


def test_the_delivery_limit_is_the_documented_sum_of_its_tries_and_waits():
    assert delivery_limit_s(NotifyConfig(conn_id="hook")) == 60, "3 x timeout_s 10 + max_wait_s 30, as documented"
    assert delivery_limit_s(NotifyConfig(conn_id="hook", timeout_s=2, max_wait_s=5)) == 11


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("99999999999", notify.RETRY_AFTER_MAX_S),
        ("9" * 400, None),
        ("Fri, 31 Dec 9999 23:59:59 GMT", notify.RETRY_AFTER_MAX_S),
        ("inf", notify.RETRY_AFTER_MAX_S),
        ("nan", None),
        ("12", 12.0),
    ],
    ids=["huge", "hundreds-of-digits", "year-9999", "inf", "nan", "plain"],
)
def test_a_retry_after_is_bounded(header: str, seconds: Any):
    assert retry_after_seconds(header, notify.RETRY_AFTER_MAX_S) == seconds
