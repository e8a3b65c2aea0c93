"""A hostile HTTP source on loopback, for service-free tests and benchmarks: a canned reply per kind of request
(the last path segment: ``count``, ``list``; a POST's body is read and answered the same way), sent at once or
trickled one byte at a time."""

from __future__ import annotations

import contextlib
import threading
import time
import tracemalloc
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HostileSource:
    """Serves ``replies[kind] = (status, headers, body)``; with ``drips[kind] = seconds``, the body one byte at a
    time, that many seconds apart. ``served`` lists the kinds asked, in order; ``finished`` the kinds whose whole
    body was sent."""

    def __init__(self) -> None:
        self.replies: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.drips: dict[str, float] = {}
        self.served: list[str] = []
        self.finished: list[str] = []
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                kind = self.path.split("?")[0].rsplit("/", 1)[-1]
                source.served.append(kind)
                status, headers, body = source.replies[kind]
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client read enough and closed
                    if kind not in source.drips:
                        self.wfile.write(body)
                        source.finished.append(kind)
                        return
                    for byte in body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(source.drips[kind])
                    source.finished.append(kind)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def connection(self) -> dict[str, Any]:
        """The fields of an Airflow http connection to this source."""
        return {"conn_type": "http", "host": "127.0.0.1", "port": self.server.server_address[1], "schema": "http"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


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
