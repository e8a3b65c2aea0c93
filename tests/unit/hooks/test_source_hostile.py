"""A hostile source on loopback: what an error body or a page can cost the crawler (memory, retries)."""

from __future__ import annotations

import contextlib
import gzip
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source import SourceApiHook

# 64 MiB of text inflating from about 64 KiB: an HTTP 500 carrying it must not be inflated.
BOMB = gzip.compress(b"<html>internal error " + b"A" * (64 * 2**20), compresslevel=9)
DEEP = b'{"code":0,"data":{"total":1,"data":[' + b"[" * 100_000 + b"]" * 100_000 + b"]}}"


class HostileHandler(BaseHTTPRequestHandler):
    replies: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}
    served: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        kind = self.path.split("?")[0].rsplit("/", 1)[-1]
        self.served.append(kind)
        status, headers, body = self.replies[kind]
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client read enough and closed
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def hostile(airflow_connection: Callable[..., None]) -> Iterator[type[HostileHandler]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostileHandler)
    HostileHandler.replies, HostileHandler.served = {}, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    airflow_connection("src", conn_type="http", host="127.0.0.1", port=server.server_address[1], schema="http")
    yield HostileHandler
    server.shutdown()
    server.server_close()


def hook() -> SourceApiHook:
    cfg = SourceConfig(conn_id="src", backoff_s=0.01, max_backoff_s=0.01, max_retries=2)
    return SourceApiHook(cfg, "jobs", "remote_jobs")


def peak_bytes(call: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """Peak Python memory allocated while ``call`` ran, and what it raised."""
    tracemalloc.start()
    try:
        call()
        raised = None
    except Exception as exc:  # noqa: BLE001 - returned to the test
        raised = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, raised


def test_a_gzip_bomb_on_an_error_reads_a_kilobyte_and_quotes_its_start(hostile):
    hostile.replies["count"] = (500, {"Content-Encoding": "gzip", "Content-Type": "text/html"}, BOMB)

    peak, raised = peak_bytes(hook().get_total)

    assert isinstance(raised, SourceError) and raised.retriable
    assert "answered HTTP 500: '<html>internal error AAAA" in str(raised)
    assert len(str(raised)) < 600, "the excerpt is short"
    assert hostile.served == ["count"] * 3, "retried as a 500 is"
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB allocated for three error bodies"


def test_json_nested_too_deeply_is_a_source_error_not_retried(hostile):
    hostile.replies["list"] = (200, {"Content-Type": "application/json"}, DEEP)

    with pytest.raises(SourceError, match="nested too deeply") as err:
        hook().get_page(0, 100)

    assert err.value.retriable is False
    assert hostile.served == ["list"], "a page that cannot decode is not fetched again"
