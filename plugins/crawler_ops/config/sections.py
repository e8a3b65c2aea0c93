"""The sections of a crawl task: ``source``, ``filter``, ``kafka`` and ``notify``.

Models only: they validate values and do no I/O (no file, no import of user modules, no environment read while
validating). Every field has a description; :mod:`crawler_ops.config.reference` turns them into the reference.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from crawler_ops.config.checks import known_timezone
from crawler_ops.config.paginators import OffsetPaginator, PaginatorConfig, with_type
from crawler_ops.config.source_auth import SourceAuth
from crawler_ops.config.source_paging import RequestConfig, check_request
from crawler_ops.config.source_responses import ResponseRule, check_rules
from crawler_ops.config.source_window import WindowFilterConfig, check_window_filter
from crawler_ops.lineage import env_bootstrap_servers, kafka_server
from crawler_ops.message.filtering import DateRule
from crawler_ops.message.shaping import FIXED_HEADERS, MessageShape, Template
from crawler_ops.message.values import check_value_schema
from crawler_ops.retry import RetryPolicy

if TYPE_CHECKING:
    from airflow.sdk import Asset

TOPIC = r"^[A-Za-z0-9._-]{1,249}$"


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
        SourceAuth(), description="how requests authenticate; secrets come from the connection only (see below)"
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
    records_path: str = Field("data.data", description="dotted JSON path of the record list in a page response")
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
        return with_type(value)

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
            check_window_filter(self.window_filter, self.request.method, counted)
        check_rules(self.responses, self.auth.oauth2, self.auth.type, feed)
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
    max_response_mb: float = Field(
        64.0,
        gt=0,
        description="MiB (1024 x 1024 bytes): a larger response body fails its request, without retry",
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
    # for at most concurrency x max_parallel_chunks pages at once (an Airflow pool bounds it across tasks).
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
        description="requests to this source connection in flight at once: the slots of the connection's Airflow pool "
        "crawler_source_<conn_id> (each chunk and plan holds min(concurrency, max_in_flight)) and a bound per "
        "process; null: no bound (tasks run in default_pool)",
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
    def in_flight(self) -> int:
        """Requests one chunk (or plan) may have in flight: its concurrency, within ``max_in_flight``."""
        return min(self.concurrency, self.max_in_flight or self.concurrency)

    @property
    def pool(self) -> str | None:
        """The connection's Airflow pool (``max_in_flight`` slots), None when in-flight requests are unbounded."""
        return None if self.max_in_flight is None else f"crawler_source_{self.conn_id}"

    @property
    def pool_slots(self) -> tuple[str, int]:
        """The pool of a step that calls this source and the slots it takes there: as many as it keeps requests in
        flight in the connection's pool, so the pool bounds them over every worker; else one of ``default_pool``."""
        return ("default_pool", 1) if self.pool is None else (self.pool, self.in_flight)

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


def message_shape(kafka: KafkaTopicConfig) -> MessageShape:
    """The key (``key_field``, ``key_fields`` joined by ':', or ``key_template``), headers and timestamp of a task's
    messages; a ValueError names the template that does not parse, or the settings that do not go together."""
    given = [name for name in ("key_fields", "key_template") if getattr(kafka, name) is not None]
    if given and kafka.key_field != KafkaTopicConfig.model_fields["key_field"].default:
        given.insert(0, "key_field")
    if len(given) > 1:
        raise ValueError(f"set only one of key_field, key_fields and key_template (got {' and '.join(given)})")
    clash = [name for name in kafka.headers if name in FIXED_HEADERS]
    if clash:
        raise ValueError(f"headers: {', '.join(clash)} is a header every message carries already; choose another")
    key = MessageShape.field(kafka.key_field)
    text = kafka.key_template
    if kafka.key_fields is not None:
        text = ":".join(f"{{{name}}}" for name in kafka.key_fields)
    if text is not None:
        try:
            key = MessageShape.of(text)
        except ValueError as exc:
            raise ValueError(f"key_template: {exc}") from exc
    headers = []
    for name, template in kafka.headers.items():
        try:
            headers.append((name, Template.parse(template)))
        except ValueError as exc:
            raise ValueError(f"headers.{name}: {exc}") from exc
    try:
        topic = Template.parse(kafka.topic_template, allow_run=False) if kafka.topic_template else None
    except ValueError as exc:
        raise ValueError(f"topic_template: {exc}") from exc
    reserved = frozenset(t for t in (kafka.dead_letter_topic, kafka.marker_topic) if t is not None)
    return replace(
        key,
        headers=tuple(headers),
        record_time=kafka.timestamp == "record_date",
        topic=topic,
        reserved=reserved,
    )


class KafkaTopicConfig(StrictModel):
    """Where kept records go: a topic, keyed by a record field, delivered at least or exactly once."""

    conn_id: str = Field(
        "kafka_default", description="Airflow connection of conn_type kafka, with librdkafka settings in its extra"
    )
    topic: str = Field(pattern=TOPIC, description="the topic kept records are published to")
    key_field: str | None = Field(
        "id",
        description="record field whose value is the message key; a record without it (or with it empty), or every "
        "record when null, is keyed by a SHA-256 of its canonical JSON",
    )
    key_fields: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        description="instead of key_field (left at its default): the key is these fields' values joined by ':' (a "
        "record lacking one is keyed by the SHA-256 of its JSON)",
    )
    key_template: str | None = Field(
        None,
        description="instead of key_field (left at its default): the key as a template over record fields, such "
        "as '{site}/{id}' ('{{' and '}}' are braces); a record lacking a field is keyed by the SHA-256 of its JSON",
    )
    headers: dict[str, str] = Field(
        {},
        description="more headers, name: template over record fields and {run.task}, {run.run_id}, {run.offset} (the "
        "source offset), {run.ref} (the run's reference time); a header whose field is absent or empty is left out",
    )
    topic_template: str | None = Field(
        None,
        description="route each kept record to the topic this template over record fields names, such as "
        "'jobs.{city_code}'; a record lacking a field goes to topic; a routed topic is created and checked as topic "
        "is, when a batch first sends to it; a name Kafka refuses dead-letters the record",
    )
    timestamp: Literal["record_date", "produce_time"] = Field(
        "record_date",
        description="the message timestamp: the record's date (the date the filter read, so retention, windows and "
        "offsetsForTimes follow it) or the time it is produced; dead letters and markers always carry produce time",
    )
    compression: Literal["lz4", "zstd", "gzip", "snappy", "none"] | None = Field(
        None, description="the producer's compression.type; default: the connection extra's, else lz4"
    )
    topic_config: dict[str, str | int | float | bool] = Field(
        {},
        description="topic settings (retention.ms, cleanup.policy, ...) given to the topic when crawler_ops creates "
        "it; on an existing topic, plan fails naming each setting whose value differs",
    )
    partitions: int = Field(
        3, ge=1, description="partitions of the topic and dead-letter topic when crawler_ops creates them"
    )
    partitioner: (
        Literal["murmur2_random", "murmur2", "consistent_random", "consistent", "fnv1a_random", "fnv1a", "random"]
        | None
    ) = Field(
        None,
        description="how a key picks its partition (librdkafka's partitioner); default: the connection extra's "
        "partitioner, else murmur2_random, which places a key where the Java producer does",
    )
    replication_factor: int | None = Field(
        None,
        ge=1,
        description="replicas of a topic crawler_ops creates; default min(3, brokers), with min.insync.replicas one "
        "less (at least 1) so acks=all survives a broker",
    )
    create_topic: bool = Field(
        True,
        description="plan creates a missing topic, dead-letter topic or marker topic; false: a missing one fails the "
        "run, naming it",
    )
    max_message_bytes: int = Field(
        1_000_000,
        ge=1024,
        description="a kept record whose message is larger (key and value) is dead-lettered with its size; at most "
        "the producer's and the topic's message.max.bytes (librdkafka's default is 1000000)",
    )
    dead_letter_topic: str | None = Field(
        None,
        pattern=TOPIC,
        description="also publish dead-lettered records here (with the reason), before the batch is done",
    )
    consumer_groups: tuple[str, ...] = Field((), description="consumer groups whose lag the status view shows")
    delivery: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once",
        description="exactly_once: each batch in one Kafka transaction with its completion marker; consumers "
        "must read with isolation.level=read_committed",
    )
    marker_topic: str | None = Field(
        None,
        pattern=TOPIC,
        description="exactly_once: the compacted topic of batch completion markers; default crawler_ops.batches.<id>",
    )
    asset_host: str | None = Field(
        None,
        description="host part of the topic's Asset URI kafka://<host>/<topic>; default: the connection's first "
        "bootstrap server when the environment defines the connection (AIRFLOW_CONN_<ID>), else the connection id",
    )

    @model_validator(mode="after")
    def _shaped(self) -> KafkaTopicConfig:
        self.shape  # noqa: B018 - one key, templates that parse, header names of its own; or the error names them
        return self

    @cached_property
    def shape(self) -> MessageShape:
        """Key, headers and timestamp of the task's messages; a ValueError names a template that does not parse."""
        return message_shape(self)

    @property
    def unique_key_field(self) -> str | None:
        """The one field that keys records (the key of a feed's newest record), when the key is one field."""
        return self.shape.key_field

    @model_validator(mode="after")
    def _separate_dead_letters(self) -> KafkaTopicConfig:
        if self.dead_letter_topic == self.topic:
            raise ValueError("dead_letter_topic must differ from topic, or dead letters would look like records")
        if self.marker_topic is not None and self.marker_topic in (self.topic, self.dead_letter_topic):
            raise ValueError("marker_topic must differ from topic and dead_letter_topic")
        return self

    @property
    def asset_host_default(self) -> str:
        """The Asset URI's host when ``asset_host`` is unset, known without I/O (DAG parsing does none): the
        connection's first bootstrap server if the environment defines the connection, so the Asset and the
        OpenLineage dataset of the topic match; else the connection id (a connection in the metadata DB or a secrets
        backend is read only when a task runs, which then warns that the two differ)."""
        try:
            servers = env_bootstrap_servers(self.conn_id)
            return kafka_server(servers) if servers else self.conn_id
        except (ValueError, TypeError, AttributeError):
            # A connection variable that does not read (bad JSON, no server) is the task runner's error to report,
            # when a task connects; the DAG still builds, named by the connection id.
            return self.conn_id

    @property
    def asset_uri(self) -> str:
        return f"kafka://{self.asset_host or self.asset_host_default}/{self.topic}"

    @property
    def asset(self) -> Asset:
        """The Airflow Asset of the topic; downstream DAGs schedule on it (``schedule=[Asset(uri)]``)."""
        from airflow.sdk import Asset  # imported here: the config model stays importable without Airflow

        return Asset(uri=self.asset_uri)


class KafkaConfig(KafkaTopicConfig):
    """Where kept records go: a topic, keyed by a record field, delivered at least or exactly once; each value the
    record's JSON as the source sent it, or framed for a Schema Registry."""

    value_format: Literal["json", "json_schema", "avro"] = Field(
        "json",
        description="json: the record's JSON text, as the source sent it. json_schema or avro: framed for a Schema "
        "Registry (magic byte 0, the schema id in 4 bytes, then JSON text or Avro binary), the schema registered under "
        "the subject <topic>-value and checked in plan before anything is produced",
    )
    registry_conn_id: str = Field(
        "schema_registry",
        description="json_schema/avro: Airflow http connection to the registry's Confluent-compatible API (its base "
        "URL, with the path, in host; a login gives basic auth)",
    )
    value_schema: dict[str, JsonValue] | str | None = Field(
        None,
        description="json_schema/avro: the schema (a JSON Schema, or an Avro record schema), inline or a file path "
        "(relative to the config's folder); default: the subject's latest version, or, for a new subject, a closed "
        "schema inferred from the newest page",
    )
    contract: Literal["freeze", "evolve", "discard_row"] | None = Field(
        None,
        description="json_schema/avro, when records do not fit the schema (a new, missing or retyped field): freeze "
        "(default) fails the plan naming the fields (a record found later fails its batch); evolve registers a "
        "widened version (not with value_schema); discard_row dead-letters each such record, naming the field",
    )

    @model_validator(mode="after")
    def _framing(self) -> KafkaConfig:
        if self.value_format == "json":
            if self.value_schema is not None or self.contract is not None:
                raise ValueError("value_schema and contract need value_format json_schema or avro")
            return self
        if self.value_schema is not None and self.contract == "evolve":
            raise ValueError(
                "contract evolve widens an inferred schema; with value_schema the schema is yours: edit it to evolve it"
            )
        if isinstance(self.value_schema, dict):
            check_value_schema(self.value_format, self.value_schema)
        return self

    @property
    def value_contract(self) -> Literal["freeze", "evolve", "discard_row"]:
        return self.contract or "freeze"


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
