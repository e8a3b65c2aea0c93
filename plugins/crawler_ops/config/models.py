"""The config entries: the DAG settings every generated DAG has, a crawl task, an executor, the maintenance block,
and :class:`LoadedConfig`, what loading a config file gives.

Models only: they validate values and do no I/O. Whether a ``transform`` or ``function`` module can be found is
checked by :mod:`crawler_ops.config.loading` after validation (``import_paths`` names those fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any, ClassVar, Literal
from zoneinfo import ZoneInfo

from pydantic import Field, ValidationInfo, field_validator, model_validator

from crawler_ops.config.checks import (
    SPECIAL_SCHEDULES,
    SQL_NAME,
    check_dotted,
    check_id,
    check_schedule,
    check_table_name,
    known_timezone,
)
from crawler_ops.config.kafka import KafkaConfig
from crawler_ops.config.sections import FilterConfig, NotifyConfig, SourceConfig, StrictModel
from crawler_ops.config.watch import WatchConfig

ALL_CATEGORIES = "*"
DAG_SCHEDULE = (
    "when the DAG runs: a five-field cron expression or preset (@hourly, @daily, ...), @once, @continuous, or null "
    "for manual runs only; read in schedule_timezone"
)
DAG_RETRIES = (
    "Airflow retries of a failed task (the DAG's default), the first after retry_delay_s, each next delay doubled "
    "up to 30 minutes"
)


class DagSettings(StrictModel):
    """What every generated DAG has: schedule, retries, connection to the crawler database, display."""

    # Dotted-path fields whose module loading looks for on the Python path when asked to (``check_imports``).
    import_paths: ClassVar[tuple[str, ...]] = ()

    enabled: bool = Field(True, description="false: no DAG is built for this entry")
    postgres_conn_id: str = Field(
        "crawler_db",
        description="Airflow connection of the PostgreSQL database holding crawler_ops' schema (progress, runs, "
        "errors); an executor's source and status tables are there too",
    )
    schedule: str | None = Field("@hourly", description=DAG_SCHEDULE)
    # Cron times (and a start_date given without an offset) are read in this zone.
    schedule_timezone: str = Field(
        "Asia/Shanghai",
        description="IANA zone the schedule's cron times are read in (0 9 * * * fires at 09:00 there), and a "
        "start_date without an offset; UTC keeps UTC crons",
    )
    start_date: datetime = Field(
        datetime(2026, 1, 1, tzinfo=UTC),
        description="ISO date or date-time from which the DAG is scheduled (earlier intervals are not caught up)",
    )
    retries: int = Field(2, ge=0, description=DAG_RETRIES)
    retry_delay_s: int = Field(30, ge=0, description="seconds before a task's first retry (doubled at each next one)")
    execution_timeout_min: int = Field(
        60, ge=1, description="minutes one try of a task may run before Airflow fails it"
    )
    paused: bool = Field(False, description="true: the DAG is created paused")
    tags: tuple[str, ...] = Field((), description="Airflow tags of the DAG, after crawler_ops' own")

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

    import_paths: ClassVar[tuple[str, ...]] = ("transform",)

    id: str = Field(
        description="task id (letters, digits, '_', '.', '-'; at most 100): the DAG is crawl_<id>, and it is the "
        "task_name in the status table"
    )
    name: str | None = Field(None, description="display name, shown in the DAG's description and docs")
    source: SourceConfig = Field(SourceConfig(), description="the HTTP source: paths, retries, rate limits")
    batch_size: int = Field(100, ge=1, le=10_000, description="records per page request and per status row (a batch)")
    filter: FilterConfig = Field(FilterConfig(), description="which records a run keeps, by their date")
    max_expired_batches: int = Field(
        5,
        ge=1,
        description="a first crawl's early stop: batches of margin read below the probed start of the date window, "
        "and the run of consecutive pages with nothing in the window below which the rest is expired",
    )
    backfill_margin_batches: int = Field(
        1,
        ge=1,
        le=1000,
        description="a backfill that probes for its interval (no source.window_filter): batches read beyond each end "
        "the probe finds. It reads every record of the interval when records out of date order always lie fewer than "
        "backfill_margin_batches x batch_size offsets apart (`crawler-ops check` measures that distance on a page)",
    )
    kafka: KafkaConfig = Field(description="where kept records are published")
    max_chunks: int = Field(
        16, ge=1, le=512, description="most crawl_chunk instances (mapped tasks) a run splits its batches into"
    )
    min_batches_per_chunk: int = Field(
        50,
        ge=1,
        description="batches a chunk gets at least, when there are enough, so an instance amortises Airflow's "
        "per-task cost",
    )
    max_parallel_chunks: int = Field(4, ge=1, description="most crawl_chunk instances of one run running at once")
    pool: str | None = Field(
        None,
        description="Airflow pool of the crawl_chunk instances, one slot each; null: the source connection's pool "
        "(see source.max_in_flight)",
    )
    claim_lease_s: int = Field(
        900, ge=10, description="seconds: a claimed batch whose worker stopped renewing it is re-claimable after this"
    )
    max_attempts: int = Field(
        5,
        ge=1,
        description="a batch failing this many times (over runs and Airflow retries) is parked until an operator "
        "skips it",
    )
    on_shrink: Literal["warn", "fail", "reset"] = Field(
        "warn",
        description="a source total below the watermark: warn (plan nothing), fail the run, or reset (crawl from "
        "scratch)",
    )
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
        None,
        description="dotted path of a callable(record) -> value published instead of the raw record (given task_id= "
        "if it takes one); its module must be found on the Python path when DAGs are parsed, and is imported only "
        "when a chunk runs",
    )
    drift_sample: int = Field(
        20,
        ge=0,
        le=10_000,
        description="published records of each page profiled (from its first) for the run's field drift report: new, "
        "missing and retyped top-level fields against earlier runs; its counts are of these sampled records; 0: none",
    )
    notify: NotifyConfig | None = Field(None, description="a signed webhook told about runs; null: none")
    watch: WatchConfig | None = Field(
        None,
        description="runs started when the source's total moved, polled by an event trigger in the triggerer (with a "
        "schedule, that stays as a safety net); null: the schedule alone",
    )

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_id(value)

    @field_validator("transform")
    @classmethod
    def _dotted(cls, value: str | None) -> str | None:
        return check_dotted(value)

    @model_validator(mode="after")
    def _feed_has_key(self) -> CrawlTaskConfig:
        self.source.paginator.check_task(self.kafka.unique_key_field, self.kafka.value_format)
        return self

    @model_validator(mode="after")
    def _watch_needs_a_total(self) -> CrawlTaskConfig:
        if self.watch is None:
            return self
        if self.source.paginator.crawl != "offsets":
            raise ValueError(
                f"watch: a {self.source.paginator.type} feed has no total to watch; drive it by its schedule"
            )
        if self.source.count_path is None:
            raise ValueError(
                "watch: the source has no count_path, and finding its total takes a dozen page requests or more; "
                "set count_path, or drive the task by its schedule"
            )
        if self.schedule in SPECIAL_SCHEDULES:
            raise ValueError(
                f"watch: schedule {self.schedule} cannot run beside the watch; give a cron expression as a safety "
                "net, or null for the watch alone"
            )
        return self

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

    import_paths: ClassVar[tuple[str, ...]] = ("function",)

    name: str = Field(
        max_length=50,
        description="the task_name in the status table (letters, digits, '_', '.', '-'); the DAG is exec_<name>",
    )
    source_table: str = Field(description="table or schema.table (default schema public) whose rows are processed")
    status_table: str = Field(
        description="table or schema.table of (id, status, start_time, end_time, task_name) rows driving the work"
    )
    category: str | None = Field(
        None, description='only rows whose category_field equals this; "*": every category, taking turns'
    )
    category_field: str = Field("category", description="column of source_table holding a row's category")
    sort_fields: tuple[str, ...] = Field(
        (), description="columns of source_table giving the processing order (then id), within each category"
    )
    output_fields: tuple[str, ...] = Field(
        description="columns passed to the function, matched exactly, then case-insensitively; must include id"
    )
    function: str = Field(
        description="dotted path of the user function called on each row; its module must be found on the Python "
        "path when DAGs are parsed, as for a crawl task's transform"
    )
    period: int = Field(
        600, ge=1, description="lease seconds: a claimed row nobody renews is re-claimable after this long"
    )
    cycle_index: int = Field(1000, ge=1, description="rows processed per run, over all workers")
    workers: int = Field(4, ge=1, le=256, description="worker task instances (mapped) of one run")
    claim_batch: int = Field(100, ge=1, le=10_000, description="most rows a worker claims ahead in one statement")
    max_attempts: int = Field(
        3, ge=1, description="a row failing this many times is parked (status 3) until an operator unparks it"
    )
    row_retry_delay_s: int = Field(300, ge=0, description="a failed row is claimable again after this many seconds")
    timeout_s: float = Field(300, gt=0, description="seconds one function call may take")
    function_style: Literal["dict", "legacy"] = Field(
        "dict",
        description="dict: function(row: dict); legacy: function(data) with data = [tuple of the output fields], "
        "returning (id, status)",
    )
    isolation: Literal["thread", "process"] = Field(
        "thread",
        description="process: each call runs in a child process (a process group of its own), killed with "
        "everything it forked when it outlives timeout_s or its worker dies",
    )
    child_memory_mb: int | None = Field(
        None,
        ge=64,
        description="isolation: process: the child's address-space limit in MB (RLIMIT_AS, set before the function "
        "is imported); a call allocating past it fails its row with a MemoryError naming the limit; unset: no limit",
    )
    create_status_table: bool = Field(
        True, description="create status_table when it is missing; false: a missing one fails the run, naming it"
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return check_id(value)

    @field_validator("source_table", "status_table")
    @classmethod
    def _table_name(cls, value: str) -> str:
        return check_table_name(value)

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
    def _function_path(cls, value: str) -> str:
        return check_dotted(value) or value

    @property
    def dag_id(self) -> str:
        return f"exec_{self.name}"

    @property
    def all_categories(self) -> bool:
        """``category: "*"``: every category of the source table, taking turns row by row."""
        return self.category == ALL_CATEGORIES


class MaintenanceConfig(DagSettings):
    """The retention DAG ``crawler_ops_maintenance``: what to delete after how long."""

    schedule: str | None = Field("@daily", description=DAG_SCHEDULE)
    retries: int = Field(1, ge=0, description=DAG_RETRIES)
    # At least a day: run rows still 'running' are deleted by age too, and no run lasts a day.
    keep_runs_days: float = Field(30, ge=1, description="days: run history rows finished longer ago are deleted")
    keep_errors_days: float = Field(
        30, ge=1, description="days: error and dead-letter rows older than this are deleted"
    )
    keep_status_days: float = Field(
        30,
        ge=1,
        description="days: done status rows that finished longer ago are deleted (crawl batch rows below their "
        "task's watermark, executor rows whose source row no longer exists)",
    )
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


class LoadedConfig(StrictModel):
    """A config as loaded: the valid entries, and a message per invalid one (which becomes a placeholder DAG)."""

    tasks: tuple[CrawlTaskConfig, ...] = Field(description="the valid crawl tasks, in file order")
    errors: Mapping[str, str] = Field(description="per invalid crawl task (by id, or #index): its message")
    executors: tuple[ExecutorTaskConfig, ...] = Field((), description="the valid executors, in file order")
    executor_errors: Mapping[str, str] = Field({}, description="per invalid executor (by name): its message")
    maintenance: MaintenanceConfig | None = Field(
        MaintenanceConfig(), description="the maintenance block, its defaults when absent; null when invalid"
    )
    maintenance_error: str | None = Field(None, description="why the maintenance block is invalid")
