"""Who is running a crawl: the task config, the Airflow run, the reference time and the trigger params."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.errors import ConfigError
from crawler_ops.filtering import Window
from crawler_ops.records import head_fields

if TYPE_CHECKING:
    from crawler_ops.hooks.source import SourceApiHook
    from crawler_ops.hooks.store import CrawlStoreHook


@dataclass(frozen=True)
class RunParams:
    """The validated trigger parameters of a crawl run (see the DAG's Params)."""

    reset: bool = False
    dry_run: bool = False
    max_batches: int | None = None
    filter_days: float | None = None
    replay_from: int | None = None
    replay_to: int | None = None
    skip_parked: bool = False
    confirm_total: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any], task_label: str) -> RunParams:
        run = cls(
            reset=bool(params.get("reset")),
            dry_run=bool(params.get("dry_run")),
            max_batches=params.get("max_batches"),
            filter_days=params.get("filter_days"),
            replay_from=params.get("replay_from"),
            replay_to=params.get("replay_to"),
            skip_parked=bool(params.get("skip_parked")),
            confirm_total=params.get("confirm_total"),
        )
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

    # The clients are imported when a step asks for one: the DAG files import this module at parse time.
    def source(self) -> SourceApiHook:
        """The source hook, paced by this process's limiter of the source connection, which shares the rate through
        the task's crawler database."""
        from crawler_ops.hooks.ratelimit import limiter_for
        from crawler_ops.hooks.source import SourceApiHook

        fields = head_fields(self.cfg.filter.date_fields, self.cfg.kafka.key_field)
        limiter = limiter_for(self.cfg.source, self.cfg.postgres_conn_id)
        return SourceApiHook(self.cfg.source, self.cfg.id, self.cfg.source_task, fields, limiter)

    def store(self) -> CrawlStoreHook:
        from crawler_ops.hooks.store import CrawlStoreHook

        return CrawlStoreHook(self.cfg.postgres_conn_id, self.cfg.id)


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


def pulled_results(ti: Any, task_id: str = "crawl_chunk") -> list[Any]:
    """Return values of the mapped instances of ``task_id`` that succeeded (failed ones have none)."""
    values = ti.xcom_pull(task_ids=task_id, key="return_value")
    if values is None:
        return []
    if isinstance(values, dict):
        return [values]
    return [v for v in values if v is not None]
