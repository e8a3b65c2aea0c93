"""What every HTTP client of the package shares (the source's, the schema registry's, the webhook's): the base URL
of a connection and wall-clock deadlines for calls made through httpx.

httpx's timeouts bound each socket operation, not a call: a source that sends one byte every few seconds never
trips a read timeout and can hold a call for minutes. Inside :func:`deadline`, every connect, write and read of a
:class:`DeadlineTransport` waits at most what is left of the deadline, and fails as a timeout once nothing is
left, so the call ends by its deadline whatever the source does.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx


def base_url(conn: Any) -> str:
    """The source connection's base URL: schema (default http), host (or a whole URL in host), port."""
    scheme = conn.schema or "http"
    host = conn.host or ""
    base = host if "://" in host else f"{scheme}://{host}"
    return f"{base}:{conn.port}" if conn.port else base


# The monotonic time by which the HTTP calls of the current thread (or context) must end; None: no deadline.
_DEADLINE: ContextVar[float | None] = ContextVar("crawler_ops_http_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """HTTP calls inside the block end within ``seconds`` (or by an enclosing deadline, if that is sooner).

    :return: the monotonic time of the deadline in force.
    """
    outer = _DEADLINE.get()
    end = time.monotonic() + seconds
    if outer is not None:
        end = min(outer, end)
    token = _DEADLINE.set(end)
    try:
        yield end
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float | None:
    """The monotonic time by which the current block's HTTP calls must end (None: no deadline); a retry loop waits
    no further."""
    return _DEADLINE.get()


def bounded(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the current deadline; ``expired`` raised when nothing is left."""
    end = _DEADLINE.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation is bounded by the deadline current when it runs."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self.stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        upgraded = self.stream.start_tls(ssl_context, server_hostname, bounded(timeout, httpcore.ConnectTimeout))
        return DeadlineStream(upgraded)

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's blocking sockets, with connections that honour :func:`deadline`."""

    def __init__(self) -> None:
        self.backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        limit = bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self.backend.connect_tcp(host, port, limit, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        limit = bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self.backend.connect_unix_socket(path, limit, socket_options))

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's HTTP transport (keep-alive pool, through an HTTP proxy if given) over :class:`DeadlineBackend`.

    :param verify: verify TLS certificates (loading the CA bundle costs 0.1-0.2 s; plain HTTP never needs it).
    :param limits: the connection pool's limits.
    :param proxy: an ``http://`` or ``https://`` proxy URL (credentials in it are sent to the proxy).
    """

    def __init__(self, verify: bool, limits: httpx.Limits, proxy: str | None = None) -> None:
        super().__init__(verify=False, limits=limits)
        # httpx has no parameter for httpcore's network backend: the pool it built (unverified, so no CA bundle was
        # loaded for it) is replaced by the same pool over the deadline-aware backend.
        pool: dict[str, Any] = {
            "ssl_context": httpx.create_ssl_context(verify=verify),
            "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry,
            "network_backend": DeadlineBackend(),
        }
        if proxy is None:
            self._pool = httpcore.ConnectionPool(**pool)
            return
        via = httpx.Proxy(proxy)
        if via.url.scheme not in ("http", "https"):
            raise ValueError(f"proxy {via.url.scheme}:// is not supported for sources; use an http:// proxy")
        self._pool = httpcore.HTTPProxy(
            proxy_url=httpcore.URL(
                scheme=via.url.raw_scheme, host=via.url.raw_host, port=via.url.port, target=via.url.raw_path
            ),
            proxy_auth=via.raw_auth,
            proxy_headers=via.headers.raw,
            proxy_ssl_context=via.ssl_context,
            **pool,
        )


def environment_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, less
    ``NO_PROXY``), which httpx no longer reads itself once it is given a transport."""
    target = httpx.URL(url)
    proxies = urllib.request.getproxies()
    if not proxies or urllib.request.proxy_bypass(target.host):
        return None
    return proxies.get(target.scheme) or proxies.get("all")
