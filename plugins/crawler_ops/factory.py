"""Config -> DAG objects: one ``crawl_<id>`` DAG per enabled task (plan -> mapped chunks -> commit).

No network or database access here: this runs at parse time. When a task process starts, only its own
DAG is built (``get_parsing_context``). An invalid task becomes a small DAG whose only task fails with
the validation message, so it is visible in the UI instead of silently missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import (
    DAG,
    Asset,
    CronTriggerTimetable,
    Param,
    TriggerRule,
    get_current_context,
    get_parsing_context,
    task,
)
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from croniter import croniter

from crawler_ops import executor, maintenance
from crawler_ops.chunk import crawl_chunk as crawl_one_chunk
from crawler_ops.commit import close_abandoned_run, commit_run, failed_plan_summary
from crawler_ops.config import (
    CrawlTaskConfig,
    DagSettings,
    ExecutorTaskConfig,
    LoadedConfig,
    MaintenanceConfig,
    broken_dag_id,
    load_config,
)
from crawler_ops.errors import ConfigError, SourceError
from crawler_ops.notify import notify_run
from crawler_ops.plan import plan_run, record_plan_failure
from crawler_ops.run import RunContext, RunParams

log = logging.getLogger(__name__)
TAGS = ("crawler_ops", "crawl")

PARAMS = {
    "reset": Param(False, type="boolean", description="Forget the watermark and status rows; crawl from scratch."),
    "dry_run": Param(False, type="boolean", description="Fetch and filter only: publish nothing, commit nothing."),
    "max_batches": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        description="Crawl at most this many batches (the newest) in this run.",
    ),
    "filter_days": Param(
        None,
        type=["null", "number"],
        exclusiveMinimum=0,
        description="Override the task's filter window (days before the reference time).",
    ),
    "replay_from": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        description="Replay offsets [replay_from, replay_to) without touching the watermark.",
    ),
    "replay_to": Param(None, type=["null", "integer"], minimum=1, description="End (exclusive) of the replay range."),
}


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


def run_context(cfg: CrawlTaskConfig, context: MutableMapping[str, Any]) -> RunContext:
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
    return RunContext(
        cfg=cfg,
        run_id=context["run_id"],
        ref=reference_time(context),
        params=params,
        map_index=getattr(ti, "map_index", -1),
        try_number=getattr(ti, "try_number", 1),
        backfill_interval=interval,
    )


def timetable_for(cfg: DagSettings) -> Any:
    """A cron schedule fires at its cron times (CronTriggerTimetable) with a data interval of one period, so
    a backfill run knows which dates are its own; other schedules are passed to Airflow as they are."""
    if cfg.schedule is None or not croniter.is_valid(cfg.schedule):
        return cfg.schedule
    fires = croniter(cfg.schedule, cfg.start_date)
    first, second = fires.get_next(datetime), fires.get_next(datetime)
    return CronTriggerTimetable(cfg.schedule, timezone="UTC", interval=second - first)


def no_retry_for_permanent_errors(step: Callable[[], Any]) -> Any:
    """Config errors and non-retriable source errors fail at once; Airflow retries everything else."""
    try:
        return step()
    except ConfigError as exc:
        raise AirflowFailException(str(exc)) from exc
    except SourceError as exc:
        if not exc.retriable:
            raise AirflowFailException(str(exc)) from exc
        raise


def doc_for(cfg: CrawlTaskConfig) -> str:
    return (
        f"### {cfg.name or cfg.id}\n\n"
        f"Crawls source data set `{cfg.source_task}` (connection `{cfg.source.conn_id}`) newest first into Kafka "
        f"topic `{cfg.kafka.topic}` (connection `{cfg.kafka.conn_id}`); progress in PostgreSQL connection "
        f"`{cfg.postgres_conn_id}`. Keeps records whose `{'` / `'.join(cfg.filter.date_fields)}` lies within "
        f"{cfg.filter.days:g} days of the run's data-interval end.\n\n"
        "**plan** counts and plans batches of "
        f"{cfg.batch_size} records from the watermark up; **crawl_chunk** (mapped, labelled by offsets) fetches, "
        "filters, publishes and marks batches done; **commit** moves the watermark and stores the run summary; "
        f"**announce** emits the Asset `{cfg.kafka.asset_uri}` when new records were published.\n\n"
        "Params: `reset`, `dry_run`, `max_batches`, `filter_days`, `replay_from`/`replay_to`."
    )


def default_args_for(cfg: DagSettings) -> dict[str, Any]:
    return {
        "owner": "crawler_ops",
        "retries": cfg.retries,
        "retry_delay": timedelta(seconds=cfg.retry_delay_s),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(minutes=30),
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


def build_crawl_dag(cfg: CrawlTaskConfig) -> DAG:
    """The DAG ``crawl_<id>`` for one crawl task."""
    with DAG(
        dag_id=cfg.dag_id,
        description=f"Crawl {cfg.name or cfg.id} into Kafka topic {cfg.kafka.topic}",
        params=dict(PARAMS),
        tags=[*TAGS, *cfg.tags],
        doc_md=doc_for(cfg),
        schedule=timetable_for(cfg),
        **dag_settings(cfg),
    ) as dag:

        @task(task_id="plan")
        def plan(**context: Any) -> list[dict[str, Any]]:
            run = run_context(cfg, context)
            try:
                return no_retry_for_permanent_errors(lambda: plan_run(run))
            except Exception as exc:
                # The crawler's own error, not the AirflowFailException that wraps a permanent one.
                record_plan_failure(run, (exc.__cause__ or exc) if isinstance(exc, AirflowFailException) else exc)
                raise

        @task(
            task_id="crawl_chunk",
            map_index_template="{{ chunk_label | default('chunk') }}",
            max_active_tis_per_dagrun=cfg.max_parallel_chunks,
            pool=cfg.pool or "default_pool",
        )
        def crawl_chunk(chunk: dict[str, Any], **context: Any) -> dict[str, Any]:
            # map_index_template renders from the task's context after it ran: label the instance by offsets.
            get_current_context()["chunk_label"] = chunk["label"]  # type: ignore[typeddict-unknown-key]
            run = run_context(cfg, context)
            return no_retry_for_permanent_errors(lambda: crawl_one_chunk(run, chunk))

        @task(task_id="commit", trigger_rule=TriggerRule.ALL_DONE)
        def commit(**context: Any) -> dict[str, Any]:
            return commit_step(cfg, context)

        # A static outlet (the dag-processor registers the Asset at parse time); skipped when nothing new was
        # published, so downstream DAGs run on new data only. Emitting through an AssetAlias from commit instead
        # failed when backfill runs committed at once: their first emissions raced to link alias and asset.
        @task(task_id="announce", outlets=[topic_asset(cfg)])
        def announce(summary: dict[str, Any]) -> dict[str, Any]:
            if not summary.get("published"):
                raise AirflowSkipException(f"task {cfg.id}: no new records published; no Asset event")
            get_current_context()["outlet_events"][topic_asset(cfg)].extra = summary
            return {"asset": cfg.kafka.asset_uri, "published": summary["published"]}

        planned = plan()
        crawled = crawl_chunk.expand(chunk=planned)
        committed = commit()
        planned >> crawled >> committed
        planned >> committed
        announce(committed)  # type: ignore[arg-type]
    return dag


def topic_asset(cfg: CrawlTaskConfig) -> Asset:
    """The Asset of the task's Kafka topic; downstream DAGs schedule on it (``schedule=[Asset(uri)]``)."""
    return Asset(uri=cfg.kafka.asset_uri)


def commit_step(cfg: CrawlTaskConfig, context: MutableMapping[str, Any]) -> dict[str, Any]:
    """Commit the run, then tell the world: the webhook on success or failure (the Asset event: ``announce``).

    A failed run fails this task without retries (retrying the commit cannot finish batches), after one
    notification; a crash of the commit itself notifies only on its last try.
    """
    ti = context["ti"]
    chunks = ti.xcom_pull(task_ids="plan")
    try:
        run = run_context(cfg, context)
    except AirflowFailException as exc:
        notify_run(cfg.notify, cfg.id, "failure", {"task": cfg.id, "run_id": context["run_id"], "errors": [str(exc)]})
        raise
    if chunks is None:
        summary = failed_plan_summary(run)
        notify_run(cfg.notify, cfg.id, "failure", summary)
        # Fail, not skip: a skipped leaf would mark the whole run successful.
        raise AirflowFailException(
            f"task {cfg.id}: plan did not finish ({'; '.join(summary['errors'])}); nothing committed, "
            "watermark unchanged"
        )
    try:
        summary = commit_run(run, chunks, pulled_results(ti) if chunks else [])
    except Exception as exc:
        if isinstance(exc, AirflowFailException) or getattr(ti, "try_number", 1) > getattr(ti, "max_tries", 0):
            notify_commit_crash(cfg, run, exc)
        raise
    log.info("crawl summary: %s", summary)
    if summary.get("status") == "failed" or summary.get("unfinished"):
        notify_run(cfg.notify, cfg.id, "failure", summary)
        raise AirflowFailException(
            f"task {cfg.id}: {summary.get('unfinished_batches', summary.get('unfinished'))} planned batches "
            f"not done (oldest {summary.get('oldest_unfinished')}); errors: {summary.get('errors')}. "
            f"The watermark stays at {summary.get('new_watermark')}; the next run retries them."
        )
    notify_run(cfg.notify, cfg.id, "success", summary)
    return summary


def notify_commit_crash(cfg: CrawlTaskConfig, run: RunContext, exc: BaseException) -> None:
    """The commit's last try failed: close the run record as failed (so the listener does not report the run
    a second time) and send the failure webhook, with the record's summary when PostgreSQL still answers."""
    try:
        summary = close_abandoned_run(cfg, run.run_id, f"commit: {type(exc).__name__}: {exc}")
    except Exception:  # PostgreSQL is probably why the commit failed: notify without the record
        log.exception("task %s: could not close the run record after the commit failed", cfg.id)
        summary = {"task": cfg.id, "run_id": run.run_id, "status": "failed", "errors": [f"commit: {exc}"]}
    if summary is not None:
        notify_run(cfg.notify, cfg.id, "failure", summary)


def pulled_results(ti: Any, task_id: str = "crawl_chunk") -> list[Any]:
    """Return values of the mapped instances of ``task_id`` that succeeded (failed ones have none)."""
    values = ti.xcom_pull(task_ids=task_id, key="return_value")
    if values is None:
        return []
    if isinstance(values, dict):
        return [values]
    return [v for v in values if v is not None]


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


def build_crawl_dags(loaded: LoadedConfig | None = None) -> dict[str, DAG]:
    """All crawl DAGs ``crawl_<id>`` of the config."""
    loaded = loaded or load_config()
    return build_dags(loaded.tasks, loaded.errors, build_crawl_dag, "crawl_")


def build_executor_dag(cfg: ExecutorTaskConfig) -> DAG:
    """The DAG ``exec_<name>``: sync -> mapped workers -> summary."""
    with DAG(
        dag_id=cfg.dag_id,
        description=f"Run {cfg.function} over {cfg.source_table} (status in {cfg.status_table})",
        tags=["crawler_ops", "executor", *cfg.tags],
        doc_md=(
            f"### executor {cfg.name}\n\n**sync** adds new ids of `{cfg.source_table}`"
            f"{f' (category {cfg.category})' if cfg.category else ''} to `{cfg.status_table}`; **work** runs "
            f"{cfg.workers} workers that claim rows (lease {cfg.period}s) and call `{cfg.function}` on up to "
            f"{cfg.cycle_index} rows in all; **summary** counts rows per status."
        ),
        schedule=timetable_for(cfg),
        **dag_settings(cfg),
    ) as dag:

        @task(task_id="sync")
        def sync() -> dict[str, int]:
            return no_retry_for_permanent_errors(lambda: executor.sync_rows(cfg))

        @task(task_id="work", map_index_template="{{ worker_label | default('worker') }}")
        def work(worker: int, **context: Any) -> dict[str, int]:
            get_current_context()["worker_label"] = f"worker {worker}"  # type: ignore[typeddict-unknown-key]
            return no_retry_for_permanent_errors(lambda: executor.run_worker(cfg, context["run_id"], worker))

        @task(task_id="summary", trigger_rule=TriggerRule.ALL_DONE)
        def summary(**context: Any) -> dict[str, Any]:
            ti = context["ti"]
            if ti.xcom_pull(task_ids="sync") is None:
                raise AirflowFailException(f"executor {cfg.name}: sync did not finish; no row was processed")
            result = executor.summarize(cfg, context["run_id"], pulled_results(ti, "work"))
            log.info("executor summary: %s", result)
            if result["workers_finished"] < cfg.workers:
                raise AirflowException(
                    f"executor {cfg.name}: {cfg.workers - result['workers_finished']} of {cfg.workers} workers "
                    f"failed; their claims were released. Status: {result['status']}"
                )
            return result

        synced = sync()
        worked = work.expand(worker=list(range(cfg.workers)))
        synced >> worked >> summary()
    return dag


def build_executor_dags(loaded: LoadedConfig | None = None) -> dict[str, DAG]:
    """All executor DAGs ``exec_<name>`` of the config."""
    loaded = loaded or load_config()
    return build_dags(loaded.executors, loaded.executor_errors, build_executor_dag, "exec_")


def build_maintenance_dag(cfg: MaintenanceConfig, loaded: LoadedConfig) -> DAG:
    """The DAG ``crawler_ops_maintenance``: three independent pruning tasks over every crawl database."""
    crawl_dbs = sorted({t.postgres_conn_id for t in loaded.tasks})
    with DAG(
        dag_id=cfg.dag_id,
        description="Retention: prune old run history, errors and done status rows",
        tags=["crawler_ops", "maintenance", *cfg.tags],
        doc_md=(
            "### crawler_ops retention\n\nDeletes, "
            f"{cfg.delete_batch} rows per statement: run history finished over {cfg.keep_runs_days:g} days ago, "
            f"error and dead-letter rows over {cfg.keep_errors_days:g} days old, done status rows finished over "
            f"{cfg.keep_status_days:g} days ago (crawl batch rows below the watermark; executor rows whose source "
            f"row is gone). Databases: {', '.join(maintenance.crawl_databases(cfg, crawl_dbs))}."
        ),
        schedule=timetable_for(cfg),
        **dag_settings(cfg),
    ) as dag:

        @task(task_id="prune_run_history")
        def prune_run_history() -> dict[str, int]:
            return maintenance.prune_all(cfg, crawl_dbs, "runs", cfg.keep_runs_days)

        @task(task_id="prune_errors")
        def prune_errors() -> dict[str, int]:
            return maintenance.prune_all(cfg, crawl_dbs, "errors", cfg.keep_errors_days)

        @task(task_id="prune_status_rows")
        def prune_status_rows() -> dict[str, Any]:
            return maintenance.prune_status_rows(cfg, crawl_dbs, loaded.executors)

        prune_run_history()
        prune_errors()
        prune_status_rows()
    return dag


def build_maintenance_dags(loaded: LoadedConfig | None = None) -> dict[str, DAG]:
    """The retention DAG (a placeholder that shows the error when the ``maintenance`` block is invalid)."""
    loaded = loaded or load_config()
    wanted = get_parsing_context().dag_id
    if loaded.maintenance_error is not None:
        broken = build_broken_dag("maintenance", loaded.maintenance_error, "crawler_ops_")
        return {broken.dag_id: broken} if wanted in (None, broken.dag_id) else {}
    cfg = loaded.maintenance
    if cfg is None or not cfg.enabled or wanted not in (None, cfg.dag_id):
        return {}
    return {cfg.dag_id: build_maintenance_dag(cfg, loaded)}
