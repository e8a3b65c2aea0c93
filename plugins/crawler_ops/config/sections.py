"""The sections of a crawl task: ``source``, ``filter`` and ``notify`` (``kafka`` is :mod:`crawler_ops.config.kafka`).

Models only: they validate values and do no I/O (no file, no import of user modules, no environment read while
validating). Every field has a description; :mod:`crawler_ops.config.reference` turns them into the reference.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crawler_ops.config.checks import known_timezone
from crawler_ops.config.kinds import with_type
from crawler_ops.config.paginators import HEADER_NAME, OffsetPaginator, PaginatorConfig
from crawler_ops.config.source_auth import BasicAuth, SourceAuth
from crawler_ops.config.source_paging import RequestConfig, check_request
from crawler_ops.config.source_responses import PATH_PATTERN, ResponseRule, check_rules
from crawler_ops.config.source_window import WindowFilterConfig
from crawler_ops.message.filtering import DateRule
from crawler_ops.retry import RetryPolicy


class StrictModel(BaseModel):
    """Frozen, and an unknown key is an error (a misspelt key must not be ignored silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceShape(StrictModel):
    """What the HTTP source's total and pages look like: where to ask, which requests, where the answers are."""

    conn_id: str = Field(
        "demo_source",
        description="Airflow HTTP connection of the source: schema, host and port of its URL, the secrets of auth "
        "(login/password for basic auth by default), extra = HTTP headers; the rate limit, the pool "
        "crawler_source_<conn_id> and an OAuth2 token belong to it",
    )
    auth: SourceAuth = Field(
        BasicAuth(),
        description="how requests authenticate, by `type`; secrets come from the connection only (see below)",
    )
    task: str | None = Field(
        None,
        description="the source's own id for this data set, put for {task} in count_path and page_path; "
        "defaults to the task id",
    )
    count_path: str | None = Field(
        "/api/{task}/count",
        description="path of the request that returns the source's total; null: the source has none, and the total "
        "is probed from pages of batch_size records, from the page of the last total found (about 2 log2 of the pages "
        "it moved: 3 within a page; each through the rate limit)",
    )
    page_path: str = Field(
        "/api/{task}/list", description="path of the request that returns one page (batch_size records)"
    )
    total_path: str = Field("data.total", description="dotted JSON path of the total in the count response")
    total_header: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        pattern=HEADER_NAME,
        description="a response header of the count answer carrying the total (`X-Total-Count`); total_path is then "
        "not read. count_path may then name a page request asking one record (`/api/{task}/items?limit=1`)",
    )
    records_path: str = Field(
        "data.data",
        description="dotted JSON path of the record list in a page response; `''` or `.`: the body is the list "
        "itself (a bare JSON array)",
    )
    records_format: Literal["json", "jsonl"] = Field(
        "json",
        description="how a page's body holds its records: `json`, one JSON document with the list at records_path; "
        "`jsonl`, JSON Lines (one record per line, blank lines skipped; records_path is not read, and the next "
        "page of a feed is named in a header)",
    )
    offset_param: str = Field("offset", description="query parameter carrying a page's start offset (offset paginator)")
    limit_param: str = Field(
        "limit", description="query parameter carrying a page's size in records (offset paginator)"
    )
    paginator: PaginatorConfig = Field(
        OffsetPaginator(),
        description="how the source numbers its pages, by `type`: by offset (the default) or by page number, or a "
        "feed whose pages name the next",
    )
    request: RequestConfig = Field(
        RequestConfig(),
        description="the request of one page: method, path, and query, header and JSON body templates; default: GET "
        "page_path with the paginator's parameters",
    )
    window_filter: WindowFilterConfig | None = Field(
        None,
        description="the parameters that make the source answer only the records of a date window; backfills read "
        "that filtered view and first crawls count it instead of searching for the window (docs/sources.md, "
        '"Window filter"); null: the window is searched for by reading single records',
    )
    responses: tuple[ResponseRule, ...] = Field(
        (),
        max_length=20,
        description="rules over the envelope of an answer (a page or the count), first match wins: throttling, an "
        "expired token or an error the source reports in the body (see docs/sources.md); none: every 200 is a page",
    )

    @field_validator("paginator", mode="before")
    @classmethod
    def _offset_by_default(cls, value: Any) -> Any:
        return with_type(value, "offset")

    @field_validator("records_path")
    @classmethod
    def _records_path(cls, value: str) -> str:
        """``''`` and ``.`` are the body itself (kept as ``''``); otherwise object keys joined by dots."""
        if value in ("", "."):
            return ""
        if not re.fullmatch(PATH_PATTERN, value):
            raise ValueError(
                f"{value!r} is not a dotted path of object keys like 'data.items' (no empty step, no space); "
                "'' or '.' when the body is the list itself"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _lines_have_no_path(cls, data: Any) -> Any:
        """JSON Lines bodies are the records themselves: records_path is the body."""
        if not isinstance(data, dict) or data.get("records_format") != "jsonl":
            return data
        if data.get("records_path", "") not in ("", "."):
            raise ValueError(
                f"records_path {data['records_path']!r}: a JSON Lines body (records_format jsonl) holds one record per "
                "line and no envelope; remove records_path"
            )
        return {**data, "records_path": ""}

    @field_validator("auth", mode="before")
    @classmethod
    def _basic_by_default(cls, value: Any) -> Any:
        return with_type(value, "basic")

    @model_validator(mode="after")
    def _sendable_request(self) -> SourceShape:
        check_request(self.paginator, self.request, self.page_query)
        feed = self.paginator.feed
        if self.window_filter is not None:
            if feed is not None:
                raise ValueError(
                    f"window_filter: a {feed} feed has no offsets to read a filtered view by (its walk stops at the "
                    "window's start by itself); remove window_filter"
                )
            counted = (self.window_filter.count_path or self.count_path) is not None
            self.window_filter.check(self.request.method, counted)
        check_rules(self.responses, self.auth.oauth2, self.auth.type, feed)
        if self.records_format == "jsonl":
            self.paginator.check_lines()
        if self.total_header is not None and self.count_path is None:
            raise ValueError(
                f"total_header {self.total_header}: the total is read from the answer to count_path, which is null; "
                "set count_path (a page request asking one record will do) or remove total_header"
            )
        return self

    @property
    def page_query(self) -> dict[str, str]:
        """The query templates of a page request: ``request.query``, else the paginator's parameters when there is
        no body, else none."""
        if self.request.query is not None:
            return dict(self.request.query)
        if self.request.body is not None:
            return {}
        return self.paginator.default_query(self.offset_param, self.limit_param)

    @property
    def request_path(self) -> str:
        """The path template of a page request."""
        return self.request.path if self.request.path is not None else self.page_path


class SourceConfig(SourceShape):
    """How to ask the HTTP source for its total and its pages (:class:`SourceShape`), and how hard: timeouts,
    retries, rate limits, memory. Paths may contain ``{task}``."""

    timeout_s: float = Field(
        30.0,
        gt=0,
        description="seconds each connect, read or write of a request may wait (deadline_s bounds the whole "
        "request); a timed-out request is retried",
    )
    deadline_s: float = Field(
        120.0,
        gt=0,
        description="seconds: wall-clock limit of one request, body included (timeout_s bounds each read); the wait "
        "for a rate-limit slot comes before it starts and is no longer than this either (a request whose slot is "
        "further away fails at once, retriable); a request past it is retried as a timeout",
    )
    max_retries: int = Field(
        4,
        ge=0,
        le=20,
        description="retries of one request after a retriable failure (5xx, 429, timeout, truncated or malformed "
        "JSON); then the step fails and Airflow's retries take over",
    )
    backoff_s: float = Field(
        0.5,
        ge=0,
        description="seconds: the longest wait before a request's first retry, doubled at each further one up to "
        "max_backoff_s; each wait is drawn at random below it (full jitter), so workers that failed together do not "
        "retry together; a Retry-After sent by the source wins",
    )
    max_backoff_s: float = Field(
        30.0, ge=0, description="seconds: the ceiling of any backoff wait between two tries of a request"
    )
    max_retry_after_s: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="seconds: the longest Retry-After honoured (before a retry, and as the pause of every worker on "
        "the connection); a longer one, inf or a far HTTP date counts as this, a negative one as 0, NaN or an "
        "unreadable one as none",
    )
    defer_after_s: float | None = Field(
        60.0,
        gt=0,
        le=86_400,
        description="seconds: a chunk that must wait longer than this for the source (a Retry-After, a pause or queue "
        "of the shared rate limit) stops after its last finished batch and defers to Airflow's triggerer, freeing its "
        "worker and pool slot; it resumes at the same batch once the connection's rate limit opens again (15 s later "
        "at the earliest). At most max_retries deferrals in a row without a batch finished, then the chunk fails "
        "(retriable). null: wait in the worker. Feeds always wait in the worker",
    )
    max_response_mb: float = Field(
        64.0,
        gt=0,
        description="MiB (1024 x 1024 bytes): a larger response body fails its request, without retry",
    )
    max_part_requests: int = Field(
        32,
        ge=2,
        le=10_000,
        description="parts one batch's page may be read in when it is too large or too slow whole (each part one "
        "request and its retries); past it, or past parts_budget_s, the batch fails (retriable) naming both",
    )
    parts_budget_s: float = Field(
        600.0,
        gt=0,
        description="seconds: wall-clock limit of reading one batch's page in parts, every part and retry included",
    )
    chunk_memory_mb: float | None = Field(
        None,
        gt=0,
        description="MiB: the response bodies one chunk holds at once, from their first byte until Kafka confirmed "
        "the page's batch (its messages keep slices of the body); the page the chunk needs next may always read, "
        "others wait while all bodies would pass chunk_memory_mb - 3 x max_response_mb, so a chunk holds at most "
        "max(chunk_memory_mb, 3 x max_response_mb); default 4 x max_response_mb (256 with the defaults)",
    )
    # Eight pages in flight keep a chunk busy at a remote source's 50-200 ms per page; a run asks the source
    # for at most concurrency x max_parallel_chunks pages at once (max_in_flight bounds it across tasks).
    concurrency: int = Field(
        8, ge=1, le=64, description="pages fetched concurrently within one chunk (also the window search's width)"
    )
    # Per-connection limits shared by every task, run and worker on it (crawler_ops.hooks.source.ratelimit). The
    # defaults suit a public API; a source you own can take more, and null turns a limit off (benchmarks).
    requests_per_s: float | None = Field(
        10.0,
        gt=0,
        description="requests per second to this source connection over all workers (shared through PostgreSQL); "
        "null: no rate limit",
    )
    max_in_flight: int | None = Field(
        8,
        ge=1,
        le=1024,
        description="requests to this source connection in flight at once over every worker (permits shared fairly "
        "through PostgreSQL), and the slots of the connection's Airflow pool crawler_source_<conn_id>, where each "
        "plan and chunk takes one; null: no bound (tasks run in default_pool)",
    )
    min_requests_per_s: float = Field(
        0.1, gt=0, description="the shared rate never drops below this (or requests_per_s, if lower) after 429s"
    )
    rate_recovery_s: float = Field(
        60.0,
        gt=0,
        description="after a 429 halved the shared rate, it grows back by requests_per_s / rate_recovery_s each second",
    )

    @field_validator("requests_per_s", mode="before")
    @classmethod
    def _positive_rate(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not value > 0:
            raise ValueError(f"{value!r} would stop every request; use a positive rate, or null for no rate limit")
        return value

    @property
    def pool(self) -> str | None:
        """The connection's Airflow pool (``max_in_flight`` slots), None when in-flight requests are unbounded."""
        return None if self.max_in_flight is None else f"crawler_source_{self.conn_id}"

    @property
    def pool_slots(self) -> tuple[str, int]:
        """The pool of a step that calls this source and the slots it takes there: one of the connection's pool, so at
        most ``max_in_flight`` steps of the source run at once, each holding permits only for the requests it has in
        flight (:mod:`crawler_ops.hooks.source.flight`); else one of ``default_pool``."""
        return ("default_pool", 1) if self.pool is None else (self.pool, 1)

    @property
    def retry(self) -> RetryPolicy:
        """How a request to the source (a page, a count, a token) is tried again after a retriable failure."""
        return RetryPolicy(self.max_retries, self.backoff_s, self.max_backoff_s, self.max_retry_after_s)


class FilterConfig(StrictModel):
    """Which records a run keeps: by the first date field present and parseable, read in ``timezone``."""

    date_fields: tuple[str, ...] = Field(
        ("aae397", "Collect_time"),
        description="record fields that may hold its date, in order: the first present and parseable one is the "
        "record's date; a record with none is dead-lettered with the reason",
    )
    days: float = Field(
        7,
        gt=0,
        le=36_500,
        description="days: runs that move the watermark, and offset replays, keep records dated at or after the "
        "run's reference time minus this (the filter_days run parameter overrides it)",
    )
    timezone: str = Field(
        "Asia/Shanghai", description="IANA zone of dates sent without an offset, such as 2026-11-20 10:00:00"
    )
    future_tolerance_hours: float = Field(
        24,
        ge=0,
        description="hours: a date later than the wall clock plus this is no real date; its record is dead-lettered",
    )

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        return known_timezone(value)

    @field_validator("date_fields")
    @classmethod
    def _some_field(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("name at least one date field")
        return value

    @property
    def rule(self) -> DateRule:
        return DateRule(self.date_fields, self.timezone)

    @property
    def tolerance(self) -> timedelta:
        return timedelta(hours=self.future_tolerance_hours)


class NotifyConfig(StrictModel):
    """A webhook called with the run summary when a run succeeds or fails, and (``started`` in ``on``) with the
    plan when a run has planned its batches.

    The URL and the HMAC secret come from an Airflow connection (``host`` = the URL, ``password`` =
    the secret), never from this file. ``max_wait_s`` caps the time one delivery spends waiting between its
    tries, ``Retry-After`` included.
    """

    conn_id: str = Field(
        description="Airflow connection of the webhook: host = its URL, password = the HMAC secret the body is "
        "signed with"
    )
    on: tuple[Literal["started", "success", "failure"], ...] = Field(
        ("success", "failure"),
        description="the events that call the webhook: a run that succeeded, failed, or (started) planned its batches; "
        'quote the key ("on":): YAML reads a bare on as the boolean true',
    )
    timeout_s: float = Field(10.0, gt=0, le=120, description="seconds one HTTP request to the webhook may take")
    max_wait_s: float = Field(
        30.0,
        ge=0,
        le=600,
        description="seconds one delivery may spend waiting between its tries, Retry-After included; a receiver "
        "asking for longer is given up on",
    )
