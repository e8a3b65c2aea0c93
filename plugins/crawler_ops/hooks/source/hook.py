"""SourceApiHook: the paginated HTTP JSON source, through httpx with keep-alive, timeouts and bounded retries."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
from airflow.sdk import BaseHook

from crawler_ops.config import SourceConfig
from crawler_ops.errors import (
    AnswerTooHeavyError,
    SourceDeferral,
    SourceError,
    SourcePausedError,
    StatusTableError,
    TokenExpiredError,
)
from crawler_ops.hooks.answers import ERROR_EXCERPT_CHARS, error_excerpt, read_bounded, read_start
from crawler_ops.hooks.http import DeadlineTransport, base_url, deadline, environment_proxy
from crawler_ops.hooks.source.auth import extra_headers, redact, source_auth
from crawler_ops.hooks.source.budget import current_account
from crawler_ops.hooks.source.feed import HeadedBody
from crawler_ops.hooks.source.paging import DEFAULT_BATCH_SIZE, PageCall, Paging, Send, join_pages, probe_total
from crawler_ops.hooks.source.parts import PartsBudget, read_in_parts
from crawler_ops.hooks.source.responses import (
    COUNT_BODY_BYTES,
    Split,
    count_total,
    decode_body,
    decode_page,
    header_total,
    lines_as_array,
)
from crawler_ops.hooks.source.rule_actions import check_answer, renew_token
from crawler_ops.hooks.source.rules import wanted_statuses
from crawler_ops.hooks.source.wire import WireTransport
from crawler_ops.message.pages import Page
from crawler_ops.retry import RETRIABLE_STATUS, retry_after_seconds

if TYPE_CHECKING:
    from crawler_ops.hooks.source.ratelimit import SourceLimiter
    from crawler_ops.hooks.source.tokens import SharedToken

#: Turns a body into its typed value (None: any JSON).
Decode = Callable[[bytes], Any] | None

#: The default of ``source.max_retry_after_s``.
MAX_RETRY_AFTER_S = SourceConfig.model_fields["max_retry_after_s"].default


def http_client(conn: Any, source: SourceConfig, label: str = "", token: SharedToken | None = None) -> httpx.Client:
    """A keep-alive client for the connection: base URL from schema/host/port, ``source.auth`` with the connection's
    secrets (:mod:`crawler_ops.hooks.source.auth`; ``token``: its shared OAuth2 token), headers from the extra; as many
    connections as pages in flight (plus two)."""
    base = base_url(conn)
    headers = extra_headers(conn, source)
    auth = source_auth(conn, source, base, label or source.conn_id, token)
    # Loading the CA bundle for a verifying TLS context costs 0.1-0.2 s per client; a plain-HTTP source
    # (redirects are not followed) never uses it.
    verify, proxy = base.lower().startswith("https://"), environment_proxy(base)
    transport: httpx.BaseTransport
    if proxy is None:
        transport = WireTransport(verify, max_idle=source.concurrency + 2)
    else:
        limits = httpx.Limits(max_connections=source.concurrency + 2, max_keepalive_connections=source.concurrency + 2)
        transport = DeadlineTransport(verify, limits, proxy)
    return httpx.Client(
        base_url=base, headers=headers, auth=auth, timeout=httpx.Timeout(source.timeout_s), transport=transport
    )


class SourceApiHook(BaseHook):
    """Reads the total and the pages of one data set of a paginated HTTP JSON API.

    The Airflow connection gives the base URL, the secrets of ``source.auth`` and headers (:func:`http_client`).

    :param source: the task's source config (paths, JSON paths, timeouts, retry policy).
    :param task_label: the crawl task id, used in error messages.
    :param source_task: the source's own id of the data set.
    :param fields: record fields each page's decode also reads for the filter
        (:func:`crawler_ops.message.pages.head_fields`).
    :param limiter: this process's limiter of the source connection
        (:func:`crawler_ops.hooks.source.ratelimit.limiter_for`), used until :meth:`close` (none: requests are not
        limited), and ``token`` its shared OAuth2 token (:func:`crawler_ops.hooks.source.tokens.token_for`): the
        caller builds both from the crawler database, the hook itself never talks to PostgreSQL.
    :param paging: how offsets become requests (:class:`Paging`); default: outside a run.
    :param client: an HTTP client of the connection to send through (:func:`http_client`), shared with other hooks and
        closed by the caller; default: the hook builds its own on first use and closes it.
    :param defer_after_s: a request that must wait longer than this (a Retry-After before its retry, or the shared
        rate limit's next slot) raises :class:`SourceDeferral` instead of waiting: a deferrable chunk's hook. None:
        every wait is waited.
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
        limiter: SourceLimiter | None = None,
        paging: Paging | None = None,
        token: SharedToken | None = None,
        defer_after_s: float | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.task_label = task_label
        self.source_task = source_task
        self.fields = fields
        self.split: Split | None = None  # finds a page's records in its body elsewhere (a chunk's page check)
        self.max_bytes = int(source.max_response_mb * 1024 * 1024)
        self.limiter, self.token = limiter, token
        self.defer_after_s = defer_after_s
        self.owns_client = client is None
        if client is not None:
            self.__dict__["client"] = client
        self.attached = limiter is not None
        self.paging = paging or Paging.outside_a_run(source, source_task, DEFAULT_BATCH_SIZE)
        if limiter is not None:
            limiter.attach()

    @cached_property
    def client(self) -> httpx.Client:
        return http_client(self.get_connection(self.source.conn_id), self.source, self.task_label, self.token)

    def close(self) -> None:
        if "client" in self.__dict__ and self.owns_client:
            self.client.close()
        if self.limiter is not None and self.attached:
            self.limiter.detach()
            self.attached = False

    def url_for(self, path: str) -> str:
        return path.replace("{task}", self.source_task)

    # ----------------------------------------------------------------- API

    def get_total(self, known: int | None = None) -> int:
        """The source's total (of the window's filtered view with a filtered :attr:`paging`): its count endpoint's
        answer, or probed from pages without one (``count_path: null``), starting from ``known``, a total it had
        before."""
        count = self.paging.count_request()
        if count is None:
            return probe_total(self.get_page, self.paging.batch_size, f"task {self.task_label}", known)
        label, header = f"task {self.task_label}", self.source.total_header
        if header is not None:
            read = partial(header_total, header=header, label=label)
            return int(self.get_json(count[0], "count", decode=read, max_bytes=COUNT_BODY_BYTES))
        document = self.get_json(count[0], "count", max_bytes=COUNT_BODY_BYTES)
        return count_total(document, count[1], label)

    def get_page(self, offset: int, limit: int) -> Page:
        """The records of offsets ``[offset, offset + limit)`` as raw JSON, one per record, with the values of
        :attr:`fields` of each: one request, or the pages holding them (:meth:`Paging.calls`), in parts if too heavy."""
        calls = self.paging.calls(offset, offset + limit)
        budget = self.source.max_part_requests, self.source.parts_budget_s
        return join_pages([read_in_parts(self.read_call, self.paging, call, PartsBudget(*budget)) for call in calls])

    def read_call(self, call: PageCall, has_parts: bool) -> Page:
        reader = self.paging.reader(call, self.fields, f"task {self.task_label}", self.split)
        return self.get_json(call.send, call.where, reader, has_parts=has_parts)

    def read_page(self, body: bytes, limit: int | None = None) -> Page:
        """The records of a page's body, with the values of :attr:`fields` of each (:func:`decode_page`); with
        ``limit``, a page of more records fails before they are decoded."""
        return decode_page(body, self.source.records_path, self.fields, limit, self.source.limit_param)

    # ----------------------------------------------------------------- transport

    def get_json(
        self, request: Send, what: str, decode: Decode = None, max_bytes: int | None = None, has_parts: bool = False
    ) -> Any:
        """Send and decode JSON, retrying 5xx / 429 / timeouts / truncated bodies with bounded backoff.

        With a typed ``decode``, a body of the wrong shape fails at once (retrying will not fix it). ``max_bytes``:
        a smaller cap than ``source.max_response_mb`` for the body (a count answer's). ``has_parts``: a too large or
        too slow answer fails at once, to be read in parts."""
        renewed = False

        def once() -> Any:
            nonlocal renewed
            while True:
                try:
                    return self._get_once(request, what, decode, max_bytes)
                except TokenExpiredError as exc:  # one renewal of the shared token and one retry, as after a 401
                    renew_token(self.client.auth, exc, renewed)
                    renewed = True

        retry_on = partial(worth_retrying, has_parts=has_parts)
        policy = self.source.retry
        try:
            return policy.run(
                once, SourceError, retry_on=retry_on, give_up=gave_up, on_retry=self.before_retry, sleep=time.sleep
            )
        except SourcePausedError as exc:
            if self.defer_after_s is None or exc.retry_after is None:
                raise
            raise SourceDeferral(str(exc), exc.retry_after) from exc

    def before_retry(self, exc: SourceError, retry: int, delay: float) -> None:
        """Told before the wait for retry ``retry``: a wait past ``defer_after_s`` defers instead."""
        if self.defer_after_s is not None and delay > self.defer_after_s:
            raise SourceDeferral(
                f"{exc}; the retry would wait {delay:.3g}s, longer than source.defer_after_s ({self.defer_after_s:g}s)",
                delay,
            ) from exc
        retries = self.source.max_retries
        self.log.warning("task %s: %s; retry %d/%d in %.2fs", self.task_label, exc, retry, retries, delay)

    def _get_once(self, request: Send, what: str, decode: Decode, max_bytes: int | None) -> Any:
        label = f"task {self.task_label}: {request.method} {request.path} {what}"
        # The wait for the source's rate limit comes before the request's deadline starts.
        try:
            with self.limiter.request(self.defer_after_s) if self.limiter is not None else nullcontext():
                body = self._fetch(request, label, what, max_bytes)
        except SourcePausedError as exc:  # the limiter: no slot before the deadline
            raise SourcePausedError(f"{label}: {exc}", retriable=True, retry_after=exc.retry_after) from exc
        except StatusTableError as exc:  # only the limiter talks to PostgreSQL here
            raise StatusTableError(
                f"task {self.task_label}: rate limit of source connection '{self.source.conn_id}': {exc}"
            ) from exc
        return decode_body(body, decode, label, self.source.records_path)

    def _fetch(self, request: Send, label: str, what: str, max_bytes: int | None = None) -> bytes:
        """One request within ``source.deadline_s``: the body of a 200, else a :class:`SourceError` (a 429 or a
        Retry-After also slows down every worker on the connection)."""
        started = time.monotonic()
        with deadline(self.source.deadline_s) as end:
            try:
                with self.client.stream(**request.httpx()) as response:
                    if response.status_code != 200:
                        refused(response, label, self.source, self.limiter)
                    if max_bytes is None:
                        body = read_bounded(response, self.max_bytes, label, account=current_account(), max_ratio=None)
                    else:
                        body = read_bounded(response, max_bytes, label, f"{what} answer", f"{max_bytes // 1024} KiB")
                    check_answer(response, body, label, self.source, self.limiter)
                    if max_bytes is None and self.source.records_format == "jsonl":  # a page: one record per line
                        body = lines_as_array(body, label)
                    if request.answer_headers:
                        kept = {name: response.headers.get_list(name) for name in request.answer_headers}
                        return HeadedBody.of(body, kept)
                    return body
            except httpx.TimeoutException as exc:
                raise timed_out(label, self.source, end - started, past_deadline=time.monotonic() >= end) from exc
            except httpx.TransportError as exc:
                raise SourceError(f"{label} failed: {exc!r}", retriable=True) from exc


def worth_retrying(exc: SourceError, has_parts: bool) -> bool:
    """Whether to send a failed request again: when its failure is retriable, but not when the source is paused
    (waiting here would outlive the request's deadline as well), nor when an answer too heavy is read in parts."""
    too_heavy = has_parts and isinstance(exc, AnswerTooHeavyError)
    return exc.retriable and not too_heavy and not isinstance(exc, SourcePausedError)


def gave_up(exc: SourceError, tries: int, _why: object) -> SourceError:
    """A retriable failure that outlasted the request's retries: still retriable, by Airflow, later."""
    return SourceError(f"{exc} (gave up after {tries} attempts)", retriable=True)


def timed_out(label: str, source: SourceConfig, allowed_s: float, past_deadline: bool) -> SourceError:
    """A request's timeout: of one read (retriable), or of its whole deadline (an answer too slow, read in parts
    where it can be)."""
    if not past_deadline:
        return SourceError(f"{label} timed out after {source.timeout_s}s", retriable=True)
    return AnswerTooHeavyError(
        f"{label} did not finish within its deadline of {allowed_s:.3g}s (source.deadline_s "
        f"{source.deadline_s:g}s; a read timeout, {source.timeout_s:g}s, bounds each read only)",
        retriable=True,
    )


def refused(response: httpx.Response, label: str, source: SourceConfig, limiter: SourceLimiter | None) -> NoReturn:
    """The :class:`SourceError` of an answer other than 200, after the rules of ``source.responses`` that read its
    status; a 429 or a Retry-After also slows down every worker on the connection (``limiter``)."""
    status = response.status_code
    if status in wanted_statuses(source.responses):
        start = read_start(response, COUNT_BODY_BYTES)
        check_answer(response, start, label, source, limiter)
        quoted = start[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")
    else:
        quoted = error_excerpt(response)
    retry_after = retry_after_seconds(response.headers.get("retry-after"), source.max_retry_after_s)
    if limiter is not None and (status == 429 or retry_after is not None):
        limiter.throttle(retry_after)
    raise SourceError(
        f"{label} answered HTTP {status}: {redact(quoted)!r}",
        retriable=status in RETRIABLE_STATUS,
        retry_after=retry_after,
    )
