"""Who is running a crawl: the task config, the Airflow run, the reference time and the trigger params."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.errors import ConfigError
from crawler_ops.message.filtering import Window
from crawler_ops.message.pages import head_fields

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from crawler_ops.hooks.kafka.topics import TaskTopics
    from crawler_ops.hooks.source.hook import SourceApiHook
    from crawler_ops.hooks.store.hook import CrawlStoreHook


# The JSON-schema dialect of the crawl DAGs' Params (:meth:`RunParams.airflow_params`).
DIALECT = {"$schema": "http://json-schema.org/draft-07/schema#"}


def run_param(
    default: Any,
    description: str,
    *,
    kind: str | list[str],
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
) -> Any:
    """A field of :class:`RunParams` with what the DAG's trigger form and the operators' guide show of it: its JSON
    schema (``kind`` is its ``type``; the bounds) and its description."""
    schema: dict[str, Any] = {"type": kind}
    if minimum is not None:
        schema["minimum"] = minimum
    if exclusive_minimum is not None:
        schema["exclusiveMinimum"] = exclusive_minimum
    return field(default=default, metadata={"schema": schema, "description": description})


@dataclass(frozen=True)
class RunParams:
    """The validated trigger parameters of a crawl run: the one definition of them. The crawl DAGs' Params
    (:meth:`airflow_params`) and the run-parameter table of ``docs/operators-guide.md`` (:meth:`reference_table`,
    checked by a test) are generated from these fields."""

    reset: bool = run_param(
        False, "forget the watermark and status rows; crawl from scratch (a first crawl)", kind="boolean"
    )
    dry_run: bool = run_param(
        False,
        "fetch and filter only; publish nothing, commit nothing; the summary is the commit task's return value",
        kind="boolean",
    )
    max_batches: int | None = run_param(
        None,
        "crawl at most the newest N planned batches; the watermark moves only as far as contiguous done batches allow",
        kind=["null", "integer"],
        minimum=1,
    )
    filter_days: float | None = run_param(
        None,
        "override `filter.days` (days before the reference time) for this run",
        kind=["null", "number"],
        exclusive_minimum=0,
    )
    replay_from: int | None = run_param(
        None,
        "re-crawl offsets `[replay_from, replay_to)` through the filter into Kafka; the watermark and status rows "
        "are untouched",
        kind=["null", "integer"],
        minimum=0,
    )
    replay_to: int | None = run_param(
        None, "end (exclusive) of the replay range; give both ends or neither", kind=["null", "integer"], minimum=1
    )
    skip_parked: bool = run_param(
        False,
        "let the watermark pass the task's parked batches (their records are not published); each skip is an "
        "error row of the run",
        kind="boolean",
    )
    confirm_total: int | None = run_param(
        None,
        "accept this source total although it is more than `total_jump_factor` times the last known one (it must "
        "be the total the source reports now)",
        kind=["null", "integer"],
        minimum=0,
    )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def airflow_params(cls) -> dict[str, Param]:
        """The crawl DAG's Params: the trigger form, and the JSON schema Airflow checks a run's conf against.

        Each schema names its dialect, draft-07: Airflow checks a Param's schema against its dialect's meta-schema
        whenever it resolves the Param, about 72 times a DAG when the DAG processor serializes it, and draft-07's
        meta-schema is checked in less than half the time of the default (2020-12), which it would otherwise be."""
        return {
            f.name: Param(f.default, description=f.metadata["description"], **{**DIALECT, **f.metadata["schema"]})
            for f in fields(cls)
        }

    @classmethod
    def reference_table(cls) -> str:
        """The run-parameter table of ``docs/operators-guide.md`` (Markdown)."""
        rows = [
            f"| `{f.name}` | {schema_text(f.metadata['schema'])} | {f.metadata['description']} |" for f in fields(cls)
        ]
        return "\n".join(["| param | type | effect |", "|---|---|---|", *rows]) + "\n"

    @classmethod
    def from_params(cls, params: Mapping[str, Any], task_label: str) -> RunParams:
        """The run's params (missing ones at their defaults); invalid combinations raise :class:`ConfigError`."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = params.get(f.name, f.default)
            values[f.name] = bool(value) if isinstance(f.default, bool) else value  # a switch given as null is off
        run = cls(**values)
        if (run.replay_from is None) != (run.replay_to is None):
            raise ConfigError(f"task {task_label}: give both replay_from and replay_to, or neither")
        if run.replay and not 0 <= run.replay_from < run.replay_to:  # type: ignore[operator]
            raise ConfigError(
                f"task {task_label}: replay range [{run.replay_from}, {run.replay_to}) is empty or "
                "negative; replay_from must be below replay_to"
            )
        if run.replay and run.reset:
            raise ConfigError(f"task {task_label}: reset and a replay range cannot be combined")
        return run

    @property
    def replay(self) -> bool:
        return self.replay_from is not None


@dataclass(frozen=True)
class RunContext:
    """Who is running: the task config, the Airflow run, the reference time, the params."""

    cfg: CrawlTaskConfig
    run_id: str
    ref: datetime
    params: RunParams
    map_index: int = -1
    try_number: int = 1
    backfill_interval: tuple[datetime, datetime] | None = None

    @classmethod
    def from_airflow(cls, cfg: CrawlTaskConfig, context: MutableMapping[str, Any]) -> RunContext:
        """The run of an Airflow task instance (its context); invalid params fail the task without retries."""
        ti = context["ti"]
        try:
            params = RunParams.from_params(context["params"], cfg.id)
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from exc
        interval = None
        if is_backfill(context) and not params.replay:
            start, end = context.get("data_interval_start"), context.get("data_interval_end")
            if start is None or end is None or not start < end:
                raise AirflowFailException(f"task {cfg.id}: a backfill run needs a data interval, got [{start}, {end}]")
            interval = (start, end)
        return cls(
            cfg=cfg,
            run_id=context["run_id"],
            ref=reference_time(context),
            params=params,
            map_index=getattr(ti, "map_index", -1),
            try_number=getattr(ti, "try_number", 1),
            backfill_interval=interval,
        )

    @property
    def window(self) -> Window:
        """Backfill runs keep the records dated in their own data interval ``[start, end)``. The others keep every
        record from ``ref - days`` on, however much newer than ``ref``: a run re-executed later (cleared, or
        triggered with a past logical date) still publishes what arrived since. The wall clock bounds only what
        counts as a real date."""
        if self.backfill_interval is not None:
            return Window.interval(*self.backfill_interval)
        days = self.params.filter_days if self.params.filter_days is not None else self.cfg.filter.days
        return Window.since(self.ref, days, datetime.now(UTC), self.cfg.filter.tolerance)

    @property
    def uses_status_table(self) -> bool:
        """Replays and backfills read a range and never touch the watermark or the batch rows."""
        return not (self.params.dry_run or self.params.replay or self.backfill_interval is not None)

    @property
    def reads_range(self) -> bool:
        """A replay or a backfill reads a range of offsets it finds itself, beside the watermark."""
        return self.params.replay or self.backfill_interval is not None

    @property
    def reads_filtered_view(self) -> bool:
        """A backfill of a source with ``source.window_filter`` reads the filtered view of its interval, by offsets
        within that view."""
        return self.backfill_interval is not None and self.cfg.source.window_filter is not None

    # The clients are imported when a step asks for one: the DAG files import this module at parse time.
    def source(self, filtered: bool | None = None, defers: bool = False) -> SourceApiHook:
        """The source hook, paced by this process's limiter of the source connection, which shares the rate through
        the task's crawler database; ``filtered``: its count and pages are the window's filtered view (default:
        :attr:`reads_filtered_view`); ``defers``: a wait past ``source.defer_after_s`` raises
        :class:`~crawler_ops.errors.SourceDeferral` (a deferrable chunk's hook)."""
        from crawler_ops.hooks.source.hook import SourceApiHook
        from crawler_ops.hooks.source.paging import Paging
        from crawler_ops.hooks.source.ratelimit import limiter_for
        from crawler_ops.hooks.source.tokens import token_for

        fields = head_fields(self.cfg.filter.date_fields, self.cfg.kafka.shape)
        limiter = limiter_for(self.cfg.source, self.cfg.postgres_conn_id)
        window = self.window
        view = self.reads_filtered_view if filtered is None else filtered
        paging = Paging.of_task(self.cfg, self.ref, (window.start, window.end), filtered=view)
        token = token_for(self.cfg.source, self.cfg.postgres_conn_id)
        defer_after_s = self.cfg.source.defer_after_s if defers else None
        return SourceApiHook(
            self.cfg.source,
            self.cfg.id,
            self.cfg.source_task,
            fields,
            limiter,
            paging=paging,
            token=token,
            defer_after_s=defer_after_s,
        )

    def topics(self, admin: Callable[[], AdminClient], schema_id: int | None = None) -> TaskTopics:
        """Makes the topics this run sends records to ready (``admin`` gives the admin client when first needed;
        ``schema_id``: the value schema the plan settled, registered under each routed topic's subject)."""
        from crawler_ops.hooks.kafka.topics import TaskTopics

        return TaskTopics(admin, self.cfg.kafka, self.cfg.id, self.cfg.filter.days, self.window.start, 0, schema_id)

    def store(self) -> CrawlStoreHook:
        """The task's crawl store; a dry run's reads it and drops its writes."""
        from crawler_ops.hooks.store.dry_run import DryRunStoreHook
        from crawler_ops.hooks.store.hook import CrawlStoreHook

        kind = DryRunStoreHook if self.params.dry_run else CrawlStoreHook
        return kind(self.cfg.postgres_conn_id, self.cfg.id)

    def notify(self, outcome: str, summary: Mapping[str, Any]) -> None:
        """The task's webhook about this run (``notify``), when it wants ``outcome``; nothing for a dry run."""
        from crawler_ops.telemetry.notify import notify_run

        if not self.params.dry_run:
            notify_run(self.cfg.notify, self.cfg.id, outcome, summary)


def reference_time(context: MutableMapping[str, Any]) -> datetime:
    """The run's reference time for the date filter; never wall-clock time.

    Scheduled and backfill runs: the data-interval end. Manual runs: the logical date the user gave
    (Airflow 3 sets a manual run's data interval from the trigger time, not from that date), else
    ``run_after`` when the run has no logical date.
    """
    dag_run = context.get("dag_run")
    run_type = str(getattr(dag_run, "run_type", "")).lower()
    if "manual" in run_type and context.get("logical_date") is not None:
        return context["logical_date"]
    ref = context.get("data_interval_end") or getattr(dag_run, "run_after", None)
    if ref is None:
        raise AirflowFailException("the run has neither a data interval nor run_after; cannot anchor the filter")
    return ref


def is_backfill(context: MutableMapping[str, Any]) -> bool:
    return "backfill" in str(getattr(context.get("dag_run"), "run_type", "")).lower()


def pulled_results(ti: Any, task_id: str) -> list[Any]:
    """Return values of the mapped instances of ``task_id`` that succeeded (failed ones have none)."""
    values = ti.xcom_pull(task_ids=task_id, key="return_value")
    if values is None:
        return []
    if isinstance(values, dict):
        return [values]
    return [v for v in values if v is not None]


def schema_text(schema: Mapping[str, Any]) -> str:
    """A param's JSON schema as the docs show it: ``integer or null, >= 1``."""
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    text = " or ".join(sorted(types, key=lambda t: t == "null"))
    bounds = {"minimum": ">=", "exclusiveMinimum": ">"}
    return ", ".join([text, *(f"{sign} {schema[key]}" for key, sign in bounds.items() if key in schema)])
