"""The YAML config: a ``defaults`` block merged into each task, validated per task with pydantic.

One invalid task does not hide the others: :func:`load_config` returns the valid tasks and, separately,
an error message per invalid task naming the task and the field.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from crawler_ops.errors import ConfigError
from crawler_ops.filtering import DateRule
from crawler_ops.lineage import env_bootstrap_servers, kafka_server

if TYPE_CHECKING:
    from airflow.sdk import Asset

CONFIG_ENV = "CRAWLER_OPS_CONFIG"
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "include" / "crawler_tasks.yaml"
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


M = TypeVar("M", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(_Model):
    """How to ask the HTTP source for its total and its pages. Paths may contain ``{task}``."""

    conn_id: str = "demo_source"
    task: str | None = Field(None, description="the source's own id for this data set; defaults to the task id")
    count_path: str = "/api/{task}/count"
    page_path: str = "/api/{task}/list"
    total_path: str = "data.total"
    records_path: str = "data.data"
    offset_param: str = "offset"
    limit_param: str = "limit"
    timeout_s: float = Field(30.0, gt=0)
    deadline_s: float = Field(
        120.0, gt=0, description="wall-clock limit of one request, body included (timeout_s bounds each read)"
    )
    max_retries: int = Field(4, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(30.0, ge=0)
    max_response_mb: float = Field(64.0, gt=0)
    # Eight pages in flight keep a chunk busy at a remote source's 50-200 ms per page; a run asks the source
    # for at most concurrency x max_parallel_chunks pages at once (an Airflow pool bounds it across tasks).
    concurrency: int = Field(
        8, ge=1, le=64, description="pages fetched concurrently within one chunk (also the window search's width)"
    )
    # Per-connection limits shared by every task, run and worker on it (crawler_ops.hooks.ratelimit). The
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


def known_timezone(value: str) -> str:
    """An IANA zone name such as ``Asia/Shanghai`` or ``UTC``."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {value!r}; use an IANA name such as 'Asia/Shanghai' or 'UTC'") from exc
    return value


class FilterConfig(_Model):
    date_fields: tuple[str, ...] = ("aae397", "Collect_time")
    days: float = Field(7, gt=0, le=36_500)
    timezone: str = "Asia/Shanghai"
    future_tolerance_hours: float = Field(24, ge=0)

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


class KafkaConfig(_Model):
    conn_id: str = "kafka_default"
    topic: str = Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")
    key_field: str | None = "id"
    partitions: int = Field(3, ge=1)
    replication_factor: int | None = Field(
        None,
        ge=1,
        description="replicas of a topic crawler_ops creates; default min(3, brokers), with min.insync.replicas one "
        "less (at least 1) so acks=all survives a broker",
    )
    create_topic: bool = True
    max_message_bytes: int = Field(
        1_000_000,
        ge=1024,
        description="a kept record whose message is larger (key and value) is dead-lettered with its size; at most "
        "the producer's and the topic's message.max.bytes (librdkafka's default is 1000000)",
    )
    dead_letter_topic: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
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
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="exactly_once: the compacted topic of batch completion markers; default crawler_ops.batches.<id>",
    )
    asset_host: str | None = Field(
        None,
        description="host part of the topic's Asset URI kafka://<host>/<topic>; default: the connection's first "
        "bootstrap server when the environment defines the connection (AIRFLOW_CONN_<ID>), else the connection id",
    )

    @model_validator(mode="after")
    def _separate_dead_letters(self) -> KafkaConfig:
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


DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
# A table (optionally schema-qualified) or column name from config: word characters only, so nothing that
# could carry SQL; names are also checked against the catalog and used only as quoted identifiers.
SQL_NAME = re.compile(r"^[^\W\d]\w{0,62}$")
ALL_CATEGORIES = "*"


def check_id(value: str) -> str:
    """Task ids and executor names become DAG ids and status-table values."""
    if not _ID.match(value):
        raise ValueError("use letters, digits, '_', '.', '-' (max 100), not starting with '.' or '-'")
    return value


def check_dotted(value: str | None, info: ValidationInfo | None = None) -> str | None:
    """A dotted path ``package.module.function``; when the validation context asks (``check_imports``, at parse
    time), its module must also be found on the Python path."""
    if value is None:
        return None
    if not DOTTED_PATH.match(value):
        raise ValueError(f"{value!r} is not a dotted path like 'package.module.function'")
    if info is not None and (info.context or {}).get("check_imports"):
        check_module(value)
    return value


def check_module(path: str) -> None:
    """The module of ``path`` can be found without importing it; its parent packages are imported to look."""
    module = path.rpartition(".")[0]
    try:
        spec = importlib.util.find_spec(module)
    except Exception as exc:  # a parent package that fails to import is this field's problem, reported with it
        raise ValueError(f"module '{module}' of {path!r} cannot be found: {type(exc).__name__}: {exc}") from exc
    if spec is None:
        raise ValueError(
            f"module '{module}' of {path!r} cannot be found on the Python path (dags/, plugins/, installed packages)"
        )


# Schedules Airflow takes besides cron expressions and cron presets.
SPECIAL_SCHEDULES = ("@once", "@continuous")
FIRST_FIRE_FROM = datetime(2026, 1, 1)


def check_schedule(value: str | None) -> str | None:
    """None, ``@once``, ``@continuous``, or a cron expression or preset of five fields that fires at all."""
    if value is None or value in SPECIAL_SCHEDULES:
        return value
    hint = "a cron expression such as '0 * * * *' (minute hour day-of-month month day-of-week) or '@hourly'"
    try:
        fires = croniter(value, FIRST_FIRE_FROM)
    except CroniterError as exc:
        raise ValueError(f"{value!r} is not {hint}: {exc}") from exc
    if len(fires.expanded) != 5:
        raise ValueError(f"{value!r} has {len(fires.expanded)} fields; use {hint}")
    try:
        fires.get_next(datetime)
    except CroniterBadDateError as exc:
        raise ValueError(f"{value!r} never fires (no such date); use {hint}") from exc
    return value


class NotifyConfig(_Model):
    """A webhook called with the run summary when a run succeeds or fails, and (``started`` in ``on``) with the
    plan when a run has planned its batches.

    The URL and the HMAC secret come from an Airflow connection (``host`` = the URL, ``password`` =
    the secret), never from this file. ``max_wait_s`` caps the time one delivery spends waiting between its
    tries, ``Retry-After`` included.
    """

    conn_id: str
    on: tuple[Literal["started", "success", "failure"], ...] = ("success", "failure")
    timeout_s: float = Field(10.0, gt=0, le=120)
    max_wait_s: float = Field(30.0, ge=0, le=600)


class DagSettings(_Model):
    """What every generated DAG has: schedule, retries, connection to the crawler database, display."""

    enabled: bool = True
    postgres_conn_id: str = "crawler_db"
    schedule: str | None = "@hourly"
    # Cron times (and a start_date given without an offset) are read in this zone.
    schedule_timezone: str = "Asia/Shanghai"
    start_date: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    retries: int = Field(2, ge=0)
    retry_delay_s: int = Field(30, ge=0)
    execution_timeout_min: int = Field(60, ge=1)
    paused: bool = False
    tags: tuple[str, ...] = ()

    @field_validator("schedule")
    @classmethod
    def _valid_schedule(cls, value: str | None) -> str | None:
        return check_schedule(value)

    @field_validator("schedule_timezone")
    @classmethod
    def _known_schedule_timezone(cls, value: str) -> str:
        return known_timezone(value)

    @field_validator("start_date", mode="before")
    @classmethod
    def _iso_start(cls, value: Any, info: ValidationInfo) -> datetime:
        if isinstance(value, datetime):
            moment = value
        elif isinstance(value, date):
            moment = datetime(value.year, value.month, value.day)
        else:
            try:
                moment = datetime.fromisoformat(str(value))
            except ValueError as exc:
                raise ValueError(f"{value!r} is not an ISO date such as 2026-01-01") from exc
        zone = info.data.get("schedule_timezone")
        return moment if moment.tzinfo else moment.replace(tzinfo=ZoneInfo(zone) if zone else UTC)


class CrawlTaskConfig(DagSettings):
    """One crawl task: becomes the DAG ``crawl_<id>``."""

    id: str
    name: str | None = None
    source: SourceConfig = SourceConfig()
    batch_size: int = Field(100, ge=1, le=10_000)
    filter: FilterConfig = FilterConfig()
    max_expired_batches: int = Field(5, ge=1)
    kafka: KafkaConfig
    max_chunks: int = Field(16, ge=1, le=512)
    min_batches_per_chunk: int = Field(50, ge=1)
    max_parallel_chunks: int = Field(4, ge=1)
    pool: str | None = None
    claim_lease_s: int = Field(900, ge=10, description="a claimed batch is re-claimable after this long")
    max_attempts: int = Field(
        5, ge=1, description="a batch failing this many times is parked until an operator skips it"
    )
    on_shrink: Literal["warn", "fail", "reset"] = "warn"
    max_planned_batches: int = Field(
        100_000,
        ge=1,
        description="a run that would plan more batches fails (each is a status row and part of the plan's XCom); "
        "max_batches plans the newest ones",
    )
    total_jump_factor: float = Field(
        10,
        gt=1,
        description="a source total above this many times the last known total (at least batch_size) fails the "
        "plan until a run confirms it with confirm_total",
    )
    transform: str | None = Field(
        None, description="dotted path of a callable(record) -> published value (given task_id= if it takes one)"
    )
    notify: NotifyConfig | None = None

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_id(value)

    @field_validator("transform")
    @classmethod
    def _dotted(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_dotted(value, info)

    @property
    def dag_id(self) -> str:
        return f"crawl_{self.id}"

    @property
    def source_task(self) -> str:
        return self.source.task or self.id

    @property
    def chunk_pool(self) -> tuple[str, int]:
        """The pool of ``crawl_chunk`` and the slots one instance takes: one of ``pool`` when set, else those of the
        source connection (:attr:`SourceConfig.pool_slots`)."""
        return (self.pool, 1) if self.pool is not None else self.source.pool_slots

    @property
    def marker_topic(self) -> str:
        """Where an exactly-once crawl records each batch it committed to Kafka (one compacted topic per task)."""
        return self.kafka.marker_topic or f"crawler_ops.batches.{self.id}"


class ExecutorTaskConfig(DagSettings):
    """One executor task: runs ``function`` over the rows of ``source_table``.

    Becomes the DAG ``exec_<name>``; ``name`` is the ``task_name`` in the status table.
    """

    name: str = Field(max_length=50)
    source_table: str
    status_table: str
    category: str | None = Field(
        None, description='only rows whose category_field equals this; "*": every category, taking turns'
    )
    category_field: str = "category"
    sort_fields: tuple[str, ...] = ()
    output_fields: tuple[str, ...]
    function: str
    period: int = Field(
        600, ge=1, description="lease seconds: a claimed row nobody renews is re-claimable after this long"
    )
    cycle_index: int = Field(1000, ge=1, description="rows processed per run, over all workers")
    workers: int = Field(4, ge=1, le=256)
    claim_batch: int = Field(100, ge=1, le=10_000, description="most rows a worker claims ahead in one statement")
    max_attempts: int = Field(3, ge=1)
    row_retry_delay_s: int = Field(300, ge=0, description="a failed row is claimable again after this long")
    timeout_s: float = Field(300, gt=0, description="seconds one function call may take")
    function_style: Literal["dict", "legacy"] = Field(
        "dict",
        description="dict: function(row: dict); legacy: function(data) with data = [tuple of the output fields], "
        "returning (id, status)",
    )
    isolation: Literal["thread", "process"] = Field(
        "thread", description="process: each call runs in a child process, killed when it outlives timeout_s"
    )
    create_status_table: bool = True

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return check_id(value)

    @field_validator("source_table", "status_table")
    @classmethod
    def _table_name(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) > 2 or not all(SQL_NAME.match(p) for p in parts):
            raise ValueError(f"{value!r} is not a table name like 'table' or 'schema.table'")
        return value

    @field_validator("category_field", "sort_fields", "output_fields")
    @classmethod
    def _column_names(cls, value: Any) -> Any:
        for name in (value,) if isinstance(value, str) else value:
            if not SQL_NAME.match(name):
                raise ValueError(f"{name!r} is not a column name")
        return value

    @field_validator("output_fields")
    @classmethod
    def _has_id(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not any(name.lower() == "id" for name in value):
            raise ValueError("output_fields must include 'id' (the row's unique id, also the status table's id)")
        return value

    @field_validator("function")
    @classmethod
    def _function_path(cls, value: str, info: ValidationInfo) -> str:
        return check_dotted(value, info) or value

    @property
    def dag_id(self) -> str:
        return f"exec_{self.name}"

    @property
    def all_categories(self) -> bool:
        """``category: "*"``: every category of the source table, taking turns row by row."""
        return self.category == ALL_CATEGORIES


class MaintenanceConfig(DagSettings):
    """The retention DAG ``crawler_ops_maintenance``: what to delete after how long."""

    schedule: str | None = "@daily"
    retries: int = Field(1, ge=0)
    # At least a day: run rows still 'running' are deleted by age too, and no run lasts a day.
    keep_runs_days: float = Field(30, ge=1, description="run history rows finished longer ago are deleted")
    keep_errors_days: float = Field(30, ge=1, description="error and dead-letter rows older than this are deleted")
    keep_status_days: float = Field(30, ge=1, description="done status rows that finished longer ago")
    delete_batch: int = Field(5000, ge=1, le=1_000_000, description="rows deleted per statement (and transaction)")
    # Off unless set: Airflow's metrics are off by default too, and a round costs a task instance.
    gauges_schedule: str | None = Field(
        None, description="cron or preset of the crawler_ops_gauges DAG (e.g. '*/5 * * * *'); null: no such DAG"
    )

    @field_validator("gauges_schedule")
    @classmethod
    def _valid_gauges_schedule(cls, value: str | None) -> str | None:
        if value in SPECIAL_SCHEDULES:
            raise ValueError(f"{value!r} is no periodic schedule; use a cron expression such as '*/5 * * * *'")
        return check_schedule(value)

    @property
    def dag_id(self) -> str:
        return "crawler_ops_maintenance"

    @property
    def gauges_dag_id(self) -> str:
        return "crawler_ops_gauges"


class LoadedConfig(_Model):
    tasks: tuple[CrawlTaskConfig, ...]
    errors: Mapping[str, str]
    executors: tuple[ExecutorTaskConfig, ...] = ()
    executor_errors: Mapping[str, str] = {}
    maintenance: MaintenanceConfig | None = MaintenanceConfig()
    maintenance_error: str | None = None


def broken_dag_id(label: str, prefix: str = "crawl_") -> str:
    """The DAG id of the placeholder DAG that shows the invalid config entry ``label``."""
    return prefix + (re.sub(r"[^A-Za-z0-9_.-]", "_", label.lstrip("#")) or "invalid")


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(task)"
        parts.append(f"field '{field}': {err['msg']}")
    return "; ".join(parts)


def validate_entries(
    entries: Any,
    model: type[M],
    key: str,
    defaults: Mapping[str, Any],
    kind: str,
    origin: str,
    check_imports: bool = False,
) -> tuple[list[M], dict[str, str]]:
    """Validate each entry of a config list on its own; errors are keyed by the entry's ``key`` value. With
    ``check_imports``, the modules of transforms and functions must be found on the Python path."""
    if not isinstance(entries, list):
        raise ConfigError(f"{origin}: '{kind}s' must be a list")
    valid: list[M] = []
    errors: dict[str, str] = {}
    seen: set[str] = set()
    for index, raw in enumerate(entries):
        label = str(raw.get(key)) if isinstance(raw, Mapping) and raw.get(key) else f"#{index}"
        if label in seen:
            errors[f"{label}@{index}"] = f"{origin}: {kind} '{label}': duplicate {key} ({kind} #{index})"
            continue
        seen.add(label)
        if not isinstance(raw, Mapping):
            errors[label] = f"{origin}: {kind} '{label}': must be a mapping"
            continue
        try:
            valid.append(model.model_validate(deep_merge(defaults, raw), context={"check_imports": check_imports}))
        except ValidationError as exc:
            errors[label] = f"{origin}: {kind} '{label}': {describe(exc)}"
    return valid, errors


def parse_config(document: Any, origin: str = "<config>", check_imports: bool = False) -> LoadedConfig:
    """Validate a parsed YAML document; per-entry problems go to ``errors`` / ``executor_errors``. With
    ``check_imports`` (at DAG parse time), a transform or function whose module cannot be found is one."""
    expected = ("defaults", "tasks", "executors", "maintenance")
    if not isinstance(document, Mapping):
        raise ConfigError(f"{origin}: the top level must be a mapping with {', '.join(map(repr, expected))}")
    unknown = set(document) - set(expected)
    if unknown:
        raise ConfigError(f"{origin}: unknown top-level keys {sorted(unknown)}; expected {', '.join(expected)}")
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise ConfigError(f"{origin}: 'defaults' must be a mapping")
    crawl_defaults = {key: value for key, value in defaults.items() if key != EXECUTOR_DEFAULTS}
    tasks, errors = validate_entries(
        document.get("tasks") or [], CrawlTaskConfig, "id", crawl_defaults, "task", origin, check_imports
    )
    executors, executor_errors = validate_entries(
        document.get("executors") or [],
        ExecutorTaskConfig,
        "name",
        executor_defaults(defaults, origin),
        "executor",
        origin,
        check_imports,
    )
    maintenance, maintenance_error = parse_maintenance(document.get("maintenance"), defaults, origin)
    return LoadedConfig(
        tasks=tuple(tasks),
        errors=errors,
        executors=tuple(executors),
        executor_errors=executor_errors,
        maintenance=maintenance,
        maintenance_error=maintenance_error,
    )


# ``defaults.executor``: keys for every executor only (crawl tasks do not see it).
EXECUTOR_DEFAULTS = "executor"


def executor_defaults(defaults: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """What executors take from ``defaults``: the settings every generated DAG has (schedule, retries,
    connection, ...), then the ``defaults.executor`` block over them."""
    own = defaults.get(EXECUTOR_DEFAULTS) or {}
    if not isinstance(own, Mapping):
        raise ConfigError(f"{origin}: 'defaults.{EXECUTOR_DEFAULTS}' must be a mapping")
    shared = {key: value for key, value in defaults.items() if key in DagSettings.model_fields}
    return deep_merge(shared, own)


# What the retention DAG takes from ``defaults`` (schedule and retries are the crawl tasks' own).
SHARED_DEFAULTS = (
    "postgres_conn_id",
    "schedule_timezone",
    "start_date",
    "retry_delay_s",
    "execution_timeout_min",
    "paused",
    "tags",
)


def parse_maintenance(
    raw: Any, defaults: Mapping[str, Any], origin: str
) -> tuple[MaintenanceConfig | None, str | None]:
    """The ``maintenance`` block over the shared ``defaults``; an invalid block is reported, not raised."""
    if raw is not None and not isinstance(raw, Mapping):
        return None, f"{origin}: 'maintenance' must be a mapping"
    shared = {key: defaults[key] for key in SHARED_DEFAULTS if key in defaults}
    try:
        return MaintenanceConfig.model_validate({**shared, **(raw or {})}), None
    except ValidationError as exc:
        return None, f"{origin}: maintenance: {describe(exc)}"


def load_config(path: Path | None = None, check_imports: bool = False) -> LoadedConfig:
    """Read and validate the config at ``path`` (default: ``$CRAWLER_OPS_CONFIG`` or the repo sample): one YAML
    file, or a folder whose ``*.yaml`` / ``*.yml`` files are read in name order, each with its own ``defaults``.
    With ``check_imports`` (DAG parsing, the status page), also that each transform's and function's module
    exists."""
    path = path or config_path()
    if not path.is_dir():
        return parse_config(read_document(path), str(path), check_imports)
    files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        raise ConfigError(f"the config folder {path} holds no .yaml file; set {CONFIG_ENV} to a file or a folder")
    documents = [(str(f), read_document(f)) for f in files]
    return merge_configs([(origin, parse_config(doc, origin, check_imports), doc) for origin, doc in documents])


def read_document(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read crawler config {path}: {exc}; set {CONFIG_ENV}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc


def merge_configs(parts: Sequence[tuple[str, LoadedConfig, Any]]) -> LoadedConfig:
    """One config from the files of a folder. A task id (or executor name) defined in two files is an error on
    that entry, which then builds no DAG; at most one file may hold the ``maintenance`` block."""
    tasks, errors = merge_entries([(origin, part.tasks, part.errors) for origin, part, _ in parts], "id", "task")
    executors: list[ExecutorTaskConfig]
    executors, executor_errors = merge_entries(
        [(origin, part.executors, part.executor_errors) for origin, part, _ in parts], "name", "executor"
    )
    with_block = [(origin, part) for origin, part, doc in parts if isinstance(doc, Mapping) and "maintenance" in doc]
    maintenance: MaintenanceConfig | None = with_block[0][1].maintenance if with_block else MaintenanceConfig()
    maintenance_error = with_block[0][1].maintenance_error if with_block else None
    if len(with_block) > 1:
        maintenance = None
        maintenance_error = f"maintenance: defined in {' and '.join(o for o, _ in with_block)}; keep one"
    merged: dict[str, Any] = {"tasks": tuple(tasks), "errors": errors, "executors": tuple(executors)}
    merged |= {"executor_errors": executor_errors, "maintenance": maintenance, "maintenance_error": maintenance_error}
    return parts[0][1].model_copy(update=merged)


def merge_entries(
    parts: Sequence[tuple[str, Sequence[M], Mapping[str, str]]], key: str, kind: str
) -> tuple[list[M], dict[str, str]]:
    """Entries and errors of several files by ``key``; a key seen in more than one file becomes an error."""
    seen: dict[str, list[str]] = {}
    for origin, entries, problems in parts:
        for label in [getattr(entry, key) for entry in entries] + list(problems):
            seen.setdefault(label, []).append(origin)
    twice = {label: origins for label, origins in seen.items() if len(origins) > 1}
    entries = [e for _, found, _ in parts for e in found if getattr(e, key) not in twice]
    errors = {label: message for _, _, problems in parts for label, message in problems.items() if label not in twice}
    for label, origins in twice.items():
        errors[label] = f"{kind} '{label}' is defined in {' and '.join(origins)}; keep it in one file"
    return entries, errors


def get_task(task_id: str, path: Path | None = None) -> CrawlTaskConfig:
    loaded = load_config(path)
    for task in loaded.tasks:
        if task.id == task_id:
            return task
    if task_id in loaded.errors:
        raise ConfigError(loaded.errors[task_id])
    raise ConfigError(f"no crawl task '{task_id}' in {path or config_path()}")


def config_schema() -> dict[str, Any]:
    """The JSON schema of a config file, for editors (YAML language servers read JSON schemas). Entries may leave
    out what ``defaults`` gives them, so no property is required; types, ranges and unknown keys are checked."""
    models: dict[str, type[DagSettings]] = {
        "crawl task": CrawlTaskConfig,
        "executor": ExecutorTaskConfig,
        "maintenance": MaintenanceConfig,
    }
    definitions: dict[str, Any] = {}
    schemas = {}
    for name, model in models.items():
        schema = optional_everywhere(model.model_json_schema())
        definitions |= schema.pop("$defs", {})
        schemas[name] = schema
    crawl_defaults = {**schemas["crawl task"], "description": "what every crawl task starts from"}
    crawl_defaults["properties"] = {**crawl_defaults["properties"], EXECUTOR_DEFAULTS: schemas["executor"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "crawler_ops config",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "defaults": crawl_defaults,
            "tasks": {"type": "array", "items": schemas["crawl task"]},
            "executors": {"type": "array", "items": schemas["executor"]},
            "maintenance": schemas["maintenance"],
        },
        "$defs": definitions,
    }


def optional_everywhere(schema: Any) -> Any:
    """``schema`` without ``required`` lists, at every level."""
    if isinstance(schema, dict):
        return {key: optional_everywhere(value) for key, value in schema.items() if key != "required"}
    if isinstance(schema, list):
        return [optional_everywhere(value) for value in schema]
    return schema
