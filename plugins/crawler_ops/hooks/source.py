"""SourceApiHook: the paginated HTTP JSON source, through httpx with keep-alive, timeouts and bounded retries."""

from __future__ import annotations

import email.utils
import functools
import time
import zlib
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import httpx
import msgspec
from airflow.sdk import BaseHook

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError, StatusTableError
from crawler_ops.hooks.deadline import DeadlineTransport, deadline, environment_proxy
from crawler_ops.hooks.ratelimit import limiter_for
from crawler_ops.records import Page, head_struct

RETRIABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 600.0
# Of an error response, this much of the body is read (and inflated, if compressed); this much is quoted.
ERROR_BODY_BYTES = 1024
ERROR_EXCERPT_CHARS = 200


def json_path(document: Any, path: str) -> Any:
    """Follow a dotted path (``data.data``) through nested mappings; KeyError names the missing step."""
    node = document
    for step in path.split("."):
        if not isinstance(node, Mapping) or step not in node:
            raise KeyError(step)
        node = node[step]
    return node


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@functools.cache
def page_decoder(records_path: str, item: Any = msgspec.Raw) -> msgspec.json.Decoder[Any]:
    """Decodes a page envelope down to ``records_path`` in one pass, each record as ``item`` (raw JSON, or a
    struct of some of its fields).

    For ``data.data`` the type is ``{"data": {"data": [item, ...]}}``; other keys are skipped, and each
    level's value is reached through the attribute ``v``.
    """
    node: Any = list[item]
    for depth, step in enumerate(reversed(records_path.split("."))):
        node = msgspec.defstruct(f"PageLevel{depth}", [("v", node)], rename={"v": step})
    return msgspec.json.Decoder(node)


def unwrap(envelope: Any, records_path: str) -> Any:
    """The records list inside an envelope decoded by :func:`page_decoder`."""
    for _ in records_path.split("."):
        envelope = envelope.v
    return envelope


def base_url(conn: Any) -> str:
    """The source connection's base URL: schema (default http), host (or a whole URL in host), port."""
    scheme = conn.schema or "http"
    host = conn.host or ""
    base = host if "://" in host else f"{scheme}://{host}"
    return f"{base}:{conn.port}" if conn.port else base


def http_client(conn: Any, source: SourceConfig) -> httpx.Client:
    """A keep-alive client for the connection: base URL from schema/host/port, basic auth from login/password,
    headers from the extra; as many connections as pages in flight (plus two)."""
    base = base_url(conn)
    headers = {str(k): str(v) for k, v in (conn.extra_dejson or {}).items() if not isinstance(v, (dict, list))}
    auth = httpx.BasicAuth(conn.login, conn.password or "") if conn.login else None
    limits = httpx.Limits(max_connections=source.concurrency + 2, max_keepalive_connections=source.concurrency + 2)
    # Loading the CA bundle for a verifying TLS context costs 0.1-0.2 s per client; a plain-HTTP source
    # (redirects are not followed) never uses it.
    transport = DeadlineTransport(base.lower().startswith("https://"), limits, environment_proxy(base))
    return httpx.Client(
        base_url=base, headers=headers, auth=auth, timeout=httpx.Timeout(source.timeout_s), transport=transport
    )


def error_excerpt(response: httpx.Response) -> str:
    """The start of an error response's body as text: at most ``ERROR_BODY_BYTES`` read from the wire, and a
    compressed body inflated only that far, so a hostile error body costs neither memory nor time."""
    if response.is_stream_consumed:  # a body in memory already (decoded): nothing more to read
        return response.content[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")
    raw = b""
    for part in response.iter_raw():
        raw += part
        if len(raw) >= ERROR_BODY_BYTES:
            break
    raw = raw[:ERROR_BODY_BYTES]
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "deflate"):
        try:  # wbits 47: a gzip or zlib header, detected
            raw = zlib.decompressobj(wbits=47).decompress(raw, ERROR_BODY_BYTES)
        except zlib.error:
            return f"({encoding} body that does not inflate)"
    elif encoding and encoding != "identity":
        return f"({encoding} body)"
    return raw[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")


def read_bounded(response: httpx.Response, max_bytes: int, label: str) -> bytes:
    """The body of ``response``; a body over ``max_bytes`` (declared or streamed) is an error, not retried."""
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise SourceError(f"{label}: response of {declared} bytes exceeds source.max_response_mb", retriable=False)
    chunks: list[bytes] = []
    size = 0
    for part in response.iter_bytes():
        size += len(part)
        if size > max_bytes:
            raise SourceError(f"{label}: response exceeds source.max_response_mb", retriable=False)
        chunks.append(part)
    return b"".join(chunks)


class SourceApiHook(BaseHook):
    """Reads the total and the pages of one data set of a paginated HTTP JSON API.

    The Airflow connection gives the base URL (schema, host, port), optional basic auth (login/password)
    and extra HTTP headers (the connection's extra, a JSON object of header names to values).

    :param source: the task's source config (paths, JSON paths, timeouts, retry policy).
    :param task_label: the crawl task id, used in error messages.
    :param source_task: the source's own id of the data set.
    :param fields: record fields each page's decode also reads (:func:`crawler_ops.records.head_fields`),
        so filtering does not decode every record again.
    :param postgres_conn_id: the crawler database, through which the connection's rate limit is shared
        (:mod:`crawler_ops.hooks.ratelimit`); without it, requests are not limited.
    """

    conn_name_attr = "source_conn_id"
    default_conn_name = "demo_source"
    conn_type = "http"
    hook_name = "Crawler source API"

    def __init__(
        self,
        source: SourceConfig,
        task_label: str,
        source_task: str,
        fields: tuple[str, ...] = (),
        postgres_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.task_label = task_label
        self.source_task = source_task
        self.fields = fields
        self.max_bytes = int(source.max_response_mb * 1024 * 1024)
        self.limiter = limiter_for(source, postgres_conn_id)
        self.attached = self.limiter is not None
        if self.limiter is not None:
            self.limiter.attach()

    @cached_property
    def client(self) -> httpx.Client:
        return http_client(self.get_connection(self.source.conn_id), self.source)

    def close(self) -> None:
        if "client" in self.__dict__:
            self.client.close()
        if self.limiter is not None and self.attached:
            self.limiter.detach()
            self.attached = False

    def url_for(self, path: str) -> str:
        return path.replace("{task}", self.source_task)

    # ----------------------------------------------------------------- API

    def get_total(self) -> int:
        document = self.get_json(self.url_for(self.source.count_path), {}, "count")
        try:
            total = json_path(document, self.source.total_path)
        except KeyError as exc:
            raise SourceError(
                f"task {self.task_label}: count response has no '{self.source.total_path}' "
                f"(missing '{exc.args[0]}'); check source.total_path",
                retriable=False,
            ) from exc
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise SourceError(
                f"task {self.task_label}: total at '{self.source.total_path}' is {total!r}, not a non-negative integer",
                retriable=False,
            )
        return total

    def get_page(self, offset: int, limit: int) -> Page:
        """The records of one page as raw JSON, one per record, with the values of :attr:`fields` of each."""
        params = {self.source.offset_param: offset, self.source.limit_param: limit}
        where = f"offsets [{offset}, {offset + limit})"
        return self.get_json(self.url_for(self.source.page_path), params, where, self.read_page)

    def read_page(self, body: bytes) -> Page:
        """Two passes over the body: the records as raw JSON, then their :attr:`fields` only. Either pass skips
        what it does not keep, so both cost less than one full decode."""
        path = self.source.records_path
        records = unwrap(page_decoder(path).decode(body), path)
        if not self.fields:
            return Page(records)
        try:
            heads = unwrap(page_decoder(path, head_struct(self.fields)).decode(body), path)
        except msgspec.ValidationError:
            return Page(records)  # a record that is not an object: filtering names its offset
        return Page(records, self.fields, [msgspec.structs.astuple(head) for head in heads])

    # ----------------------------------------------------------------- transport

    def get_json(
        self, path: str, params: Mapping[str, Any], what: str, decode: Callable[[bytes], Any] | None = None
    ) -> Any:
        """GET and decode JSON, retrying 5xx / 429 / timeouts / truncated bodies with bounded backoff.

        With a typed ``decode``, a body of the wrong shape fails at once (retrying will not fix it).
        """
        attempt = 0
        while True:
            try:
                return self._get_once(path, params, what, decode)
            except SourceError as exc:
                if not exc.retriable or attempt >= self.source.max_retries:
                    if exc.retriable:
                        raise SourceError(f"{exc} (gave up after {attempt + 1} attempts)", retriable=True) from exc
                    raise
                # The source's own Retry-After wins over our backoff (capped against absurd values).
                if exc.retry_after is not None:
                    delay = min(exc.retry_after, MAX_RETRY_AFTER_S)
                else:
                    delay = min(self.source.backoff_s * 2**attempt, self.source.max_backoff_s)
                self.log.warning(
                    "task %s: %s; retry %d/%d in %.2fs",
                    self.task_label,
                    exc,
                    attempt + 1,
                    self.source.max_retries,
                    delay,
                )
                time.sleep(delay)
                attempt += 1

    def _get_once(
        self, path: str, params: Mapping[str, Any], what: str, decode: Callable[[bytes], Any] | None = None
    ) -> Any:
        label = f"task {self.task_label}: GET {path} {what}"
        # The wait for the source's rate limit comes before the request's deadline starts.
        try:
            with self.limiter.request() if self.limiter is not None else nullcontext():
                body = self._fetch(path, params, label)
        except StatusTableError as exc:  # only the limiter talks to PostgreSQL here
            raise StatusTableError(
                f"task {self.task_label}: rate limit of source connection '{self.source.conn_id}': {exc}"
            ) from exc
        try:
            return decode(body) if decode is not None else msgspec.json.decode(body)
        except msgspec.ValidationError as exc:
            raise SourceError(
                f"{label} has no list of records at '{self.source.records_path}' ({exc}); the source changed shape "
                "or source.records_path is wrong",
                retriable=False,
            ) from exc
        except msgspec.DecodeError as exc:
            raise SourceError(f"{label} returned malformed JSON ({len(body)} bytes): {exc}", retriable=True) from exc
        except RecursionError as exc:
            raise SourceError(
                f"{label} returned JSON nested too deeply to decode ({len(body)} bytes); retrying will not change it",
                retriable=False,
            ) from exc

    def _fetch(self, path: str, params: Mapping[str, Any], label: str) -> bytes:
        """One GET within ``source.deadline_s``: the body of a 200, else a :class:`SourceError` (a 429 or a
        Retry-After also slows down every worker on the connection)."""
        started = time.monotonic()
        with deadline(self.source.deadline_s) as end:
            try:
                with self.client.stream("GET", path, params=dict(params)) as response:
                    if response.status_code != 200:
                        retry_after = retry_after_seconds(response.headers.get("retry-after"))
                        if self.limiter is not None and (response.status_code == 429 or retry_after is not None):
                            self.limiter.throttle(retry_after)
                        raise SourceError(
                            f"{label} answered HTTP {response.status_code}: {error_excerpt(response)!r}",
                            retriable=response.status_code in RETRIABLE_STATUS,
                            retry_after=retry_after,
                        )
                    return read_bounded(response, self.max_bytes, label)
            except httpx.TimeoutException as exc:
                if time.monotonic() < end:
                    raise SourceError(f"{label} timed out after {self.source.timeout_s}s", retriable=True) from exc
                raise SourceError(
                    f"{label} did not finish within its deadline of {end - started:.3g}s (source.deadline_s "
                    f"{self.source.deadline_s:g}s; a read timeout, {self.source.timeout_s:g}s, bounds each read only)",
                    retriable=True,
                ) from exc
            except httpx.TransportError as exc:
                raise SourceError(f"{label} failed: {exc!r}", retriable=True) from exc
