"""WireTransport: httpx's requests sent over the standard library's ``http.client``, for the source's pages.

httpx's own transport parses HTTP in Python (h11) and copies a body six times on its way out (the socket's read,
h11's buffer and its slices, httpcore's and httpx's pieces): 2.1-2.8 ms of CPU, under the GIL, for a page of 1.7 MB.
Here the status line and headers are read by ``http.client`` and the body arrives in pieces of up to
:data:`READ_PIECE` bytes straight from the socket: 0.5-0.7 ms for the same page.

Every wait is bounded as :mod:`crawler_ops.hooks.http` bounds httpcore's: each connect, write and read of the
socket waits at most its own timeout and what is left of the current :func:`~crawler_ops.hooks.http.deadline`,
so a source trickling its headers or its body fails by the deadline. Failures are httpx's exceptions
(``ConnectTimeout``, ``ReadTimeout``, ``RemoteProtocolError``...), as the hook expects from any transport.

Idle connections are kept per origin for reuse (keep-alive) and dropped when the server has closed them or they
sat idle longer than ``keepalive_expiry``. Requests through an HTTP proxy keep httpx's transport
(:class:`~crawler_ops.hooks.http.DeadlineTransport`).
"""

from __future__ import annotations

import http.client
import io
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from crawler_ops.hooks.http import bounded

#: The most one read of a body asks of the socket (a page arrives in a few dozen reads, each one copy).
READ_PIECE = 256 * 1024
#: Buffer of the status line and headers (and the first bytes of the body that arrive with them).
HEAD_BUFFER = 64 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


class BoundedReads(io.RawIOBase):
    """A socket's reads, each waiting at most ``timeout`` and what is left of the current deadline."""

    def __init__(self, sock: socket.socket, timeout: float | None) -> None:
        self.sock, self.timeout = sock, timeout
        # A socket file keeps the socket open until it is closed too, as http.client's own does when it hands the
        # socket of a closing connection to its response.
        self.file = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self.sock.settimeout(bounded(self.timeout, httpx.ReadTimeout))
        return self.file.readinto(buffer)

    def close(self) -> None:
        self.file.close()
        super().close()


class Connection(http.client.HTTPConnection):
    """One keep-alive connection to an origin whose connect (and TLS handshake) and reads honour the deadline."""

    def __init__(self, origin: Origin, context: ssl.SSLContext | None, timeouts: dict[str, float | None]) -> None:
        super().__init__(origin[1], origin[2])
        self.origin, self.context = origin, context
        self.timeouts = timeouts
        self.idle_since = 0.0

    def connect(self) -> None:
        limit = bounded(self.timeouts.get("connect"), httpx.ConnectTimeout)
        sock = socket.create_connection((self.host, self.port), limit)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.context is not None:
            try:
                sock.settimeout(bounded(self.timeouts.get("connect"), httpx.ConnectTimeout))
                sock = self.context.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock

    # http.client makes its response with ``self.response_class(sock, method=...)``: a method does that too.
    def response_class(  # type: ignore[override]
        self, sock: socket.socket, method: str | None = None, **_: Any
    ) -> http.client.HTTPResponse:
        """What ``getresponse`` reads the answer with: http.client's parser over reads bounded by the deadline."""
        return http.client.HTTPResponse(_Readable(sock, self.timeouts.get("read")), method=method)  # type: ignore[arg-type]

    def exchange(self, request: httpx.Request) -> http.client.HTTPResponse:
        """Send ``request`` (its headers exactly as httpx made them) and read the status line and headers."""
        if self.sock is None:
            with transport_errors(httpx.ConnectTimeout, httpx.ConnectError):
                self.connect()
        assert self.sock is not None
        with transport_errors(httpx.WriteTimeout, httpx.WriteError):
            target = request.url.raw_path.decode("ascii")
            self.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in request.headers.raw:
                self.putheader(name, value)
            self.sock.settimeout(bounded(self.timeouts.get("write"), httpx.WriteTimeout))
            self.endheaders(request.read() or None)
        with transport_errors(httpx.ReadTimeout, httpx.ReadError):
            answer = self.getresponse()
        return answer

    def stale(self, now: float, expiry: float) -> bool:
        """Idle too long, or closed by the server (readable while idle: an end of file, or bytes nobody asked for)."""
        if self.sock is None or now - self.idle_since > expiry:
            return True
        try:
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True


class _Readable:
    """What http.client's response asks of a socket: a file to read it through (reads bounded by the deadline)."""

    def __init__(self, sock: socket.socket, timeout: float | None) -> None:
        self.sock, self.timeout = sock, timeout

    def makefile(self, mode: str, *_: Any, **__: Any) -> io.BufferedReader:
        return io.BufferedReader(BoundedReads(self.sock, self.timeout), HEAD_BUFFER)


class WireTransport(httpx.BaseTransport):
    """HTTP/1.1 over ``http.client`` with keep-alive, bounded by :func:`~crawler_ops.hooks.http.deadline`.

    :param verify: verify TLS certificates of ``https`` origins (the CA bundle is loaded at the first one), or the
        TLS context to use.
    :param max_idle: idle connections kept per origin.
    :param keepalive_expiry: seconds an idle connection is kept.
    """

    def __init__(self, verify: bool | ssl.SSLContext, max_idle: int, keepalive_expiry: float = 5.0) -> None:
        self.verify, self.max_idle, self.keepalive_expiry = verify, max_idle, keepalive_expiry
        self.context: ssl.SSLContext | None = None
        self.idle: dict[Origin, list[Connection]] = {}
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        scheme = request.url.scheme
        if scheme not in DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"{scheme}:// is not supported for sources")
        origin = (scheme, request.url.raw_host.decode("ascii"), request.url.port or DEFAULT_PORTS[scheme])
        conn = self.checkout(origin, request.extensions.get("timeout", {}))
        try:
            answer = conn.exchange(request)
        except BaseException:
            conn.close()
            raise
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.getheaders()]
        return httpx.Response(
            answer.status,
            headers=headers,
            stream=Body(self, conn, answer),
            extensions={
                "http_version": b"HTTP/1.0" if answer.version == 10 else b"HTTP/1.1",
                "reason_phrase": answer.reason.encode("latin-1", "replace"),
            },
        )

    def checkout(self, origin: Origin, timeouts: dict[str, float | None]) -> Connection:
        """An idle connection to ``origin`` still open, or a new one (connected when the request is sent)."""
        now = time.monotonic()
        with self.lock:
            kept = self.idle.get(origin, [])
            while kept:
                conn = kept.pop()
                if not conn.stale(now, self.keepalive_expiry):
                    conn.timeouts = timeouts
                    return conn
                conn.close()
            if origin[0] == "https" and self.context is None:
                self.context = httpx.create_ssl_context(verify=self.verify)
        return Connection(origin, self.context if origin[0] == "https" else None, timeouts)

    def release(self, conn: Connection) -> None:
        """Keep ``conn`` for the next request to its origin (closed if enough are kept)."""
        conn.idle_since = time.monotonic()
        with self.lock:
            kept = self.idle.setdefault(conn.origin, [])
            if len(kept) < self.max_idle:
                kept.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self.lock:
            kept = [conn for conns in self.idle.values() for conn in conns]
            self.idle.clear()
        for conn in kept:
            conn.close()


class Body(httpx.SyncByteStream):
    """A response's body in pieces of up to :data:`READ_PIECE` bytes; the connection goes back to the pool once it
    was read to its end, and is closed if the body was left unread or cut short."""

    def __init__(self, transport: WireTransport, conn: Connection, answer: http.client.HTTPResponse) -> None:
        self.transport, self.conn, self.answer = transport, conn, answer
        self.complete = False

    def __iter__(self) -> Iterator[bytes]:
        with transport_errors(httpx.ReadTimeout, httpx.ReadError):
            while piece := self.answer.read1(READ_PIECE):
                yield piece
            if self.answer.length:  # http.client ends a body cut short as if it were whole
                raise httpx.RemoteProtocolError(
                    f"the server closed the connection {self.answer.length} bytes before the end of the body"
                )
        self.complete = True

    def close(self) -> None:
        reusable = self.complete and not self.answer.will_close
        self.answer.close()
        if reusable:
            self.transport.release(self.conn)
        else:
            self.conn.close()


class transport_errors:
    """Socket and http.client failures raised as the httpx exceptions a transport raises: a socket's timeout as
    ``timeout`` (the deadline's raises httpx's own already), a malformed answer or one cut short as a protocol
    error, any other socket failure as ``other``."""

    def __init__(self, timeout: type[httpx.TimeoutException], other: type[httpx.TransportError]) -> None:
        self.timeout, self.other = timeout, other

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, httpx.TransportError):
            return
        if isinstance(exc, TimeoutError):
            raise self.timeout(str(exc) or "timed out") from exc
        if isinstance(exc, http.client.HTTPException):
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}") from exc
        if isinstance(exc, OSError):
            raise self.other(f"{type(exc).__name__}: {exc}") from exc
