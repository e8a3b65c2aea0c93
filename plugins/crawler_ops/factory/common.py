"""What every generated DAG shares: schedule, default args, and the placeholder DAG that shows an invalid config in
the UI."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, CronDataIntervalTimetable, get_parsing_context, task
from airflow.sdk.exceptions import AirflowFailException

from crawler_ops.config import SPECIAL_SCHEDULES, CrawlTaskConfig, DagSettings, ExecutorTaskConfig, broken_dag_id
from crawler_ops.retry import TASK_MAX_RETRY_DELAY_S, TASK_RETRY_BACKOFF

log = logging.getLogger(__name__)
TAGS = ("crawler_ops", "crawl")


def timetable_for(cfg: DagSettings) -> Any:
    """A cron schedule is read in ``schedule_timezone``; each run covers the data interval from the previous
    fire to its own fire and runs at its end, so runs (and backfills) tile the days with neither gaps nor overlaps
    even for irregular crons such as ``0 9,18 * * *``. Other schedules are passed to Airflow as they are."""
    return timetable(cfg.schedule, cfg.schedule_timezone)


def schedule_for(cfg: CrawlTaskConfig) -> Any:
    """A crawl DAG's schedule: its timetable (:func:`timetable_for`), or with ``watch`` the task's watch Asset, whose
    event trigger fires when the source moved, alone or (with a cron ``schedule``) beside the clock as a safety net."""
    if cfg.watch is None:
        return timetable_for(cfg)
    from airflow.sdk import AssetOrTimeSchedule

    asset = watch_asset(cfg)
    return asset if cfg.schedule is None else AssetOrTimeSchedule(timetable=timetable_for(cfg), assets=asset)


def watch_asset(cfg: CrawlTaskConfig) -> Any:
    """The Asset ``crawler_ops_watch_<id>`` a watched task's runs are scheduled on, watched by its trigger."""
    from airflow.sdk import Asset, AssetWatcher

    from crawler_ops.triggers.source_moved import SourceMovedTrigger

    assert cfg.watch is not None
    trigger = SourceMovedTrigger(
        crawl_task=cfg.id,
        source_task=cfg.source_task,
        source=cfg.source.model_dump(mode="json"),
        postgres_conn_id=cfg.postgres_conn_id,
        every_s=cfg.watch.every_s,
        refire_s=cfg.watch.refire_s,
    )
    name = f"crawler_ops_watch_{cfg.id}"
    return Asset(name=name, watchers=[AssetWatcher(name=f"source_moved_{cfg.id}", trigger=trigger)])


def timetable(schedule: str | None, zone: str) -> Any:
    """``schedule`` as :func:`timetable_for` reads it, in the IANA ``zone``."""
    if schedule is None or schedule in SPECIAL_SCHEDULES:
        return schedule
    return CronDataIntervalTimetable(schedule, timezone=zone)


def default_args_for(cfg: DagSettings) -> dict[str, Any]:
    return {
        "owner": "crawler_ops",
        "retries": cfg.retries,
        "retry_delay": timedelta(seconds=cfg.retry_delay_s),
        "retry_exponential_backoff": TASK_RETRY_BACKOFF,
        "max_retry_delay": timedelta(seconds=TASK_MAX_RETRY_DELAY_S),
        "execution_timeout": timedelta(minutes=cfg.execution_timeout_min),
    }


def dag_settings(cfg: DagSettings) -> dict[str, Any]:
    """What every generated DAG shares besides its schedule: one active run at a time, retries, paused or not."""
    return {
        "start_date": cfg.start_date,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": default_args_for(cfg),
        "is_paused_upon_creation": cfg.paused,
    }


def build_broken_dag(label: str, message: str, prefix: str = "crawl_") -> DAG:
    """A visible placeholder for an invalid task: its only task fails with the validation message."""
    dag_id = broken_dag_id(label, prefix)
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        tags=[*TAGS, "config-error"],
        doc_md=f"**Invalid config**\n\n```\n{message}\n```",
        is_paused_upon_creation=True,
        description="INVALID CONFIG: " + message[:200],
    ) as dag:

        @task(task_id="config_error", retries=0)
        def config_error() -> None:
            raise AirflowFailException(message)

        config_error()
    return dag


def build_dags(
    configs: Sequence[CrawlTaskConfig] | Sequence[ExecutorTaskConfig],
    errors: Mapping[str, str],
    builder: Callable[[Any], DAG],
    prefix: str,
) -> dict[str, DAG]:
    """DAGs by dag_id for valid configs, placeholders for invalid ones; only the one being run at task start."""
    wanted = get_parsing_context().dag_id
    dags: dict[str, DAG] = {}
    problems = dict(errors)
    for cfg in configs:
        if cfg.enabled and wanted in (None, cfg.dag_id):
            try:
                dags[cfg.dag_id] = builder(cfg)
            except Exception as exc:  # noqa: BLE001 - one task's DAG failing to build must not hide the others
                label = cfg.dag_id.removeprefix(prefix)
                problems[label] = f"'{label}': the DAG could not be built: {type(exc).__name__}: {exc}"
    for label, message in problems.items():
        log.error("crawler_ops config: %s", message)
        broken = build_broken_dag(label, message, prefix)
        if wanted in (None, broken.dag_id) and broken.dag_id not in dags:
            dags[broken.dag_id] = broken
    return dags
