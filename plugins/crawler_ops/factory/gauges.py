"""The DAG ``crawler_ops_gauges``: per-task gauges (backlog, lag, age of the last success, ...) every few minutes.

A DAG of its own rather than a task of ``crawler_ops_maintenance``, as Airflow teams keep monitoring apart from
housekeeping: it runs every few minutes where retention runs daily, and with one active run per DAG a long
retention run would otherwise hold the gauges back exactly when a database is slow; it has no retries (the next
round is minutes away, and a retried round would report stale values late) and a short timeout, and it can be
paused on its own. It is generated from the same ``maintenance`` block (``gauges_schedule``) and built only when
that key is set, like Airflow's metrics themselves, which are off until ``[metrics]`` turns them on.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, get_parsing_context, task

from crawler_ops.config import LoadedConfig, MaintenanceConfig, load_config
from crawler_ops.factory.common import timetable

# A round asks each source and broker with a 5 s timeout, a few tasks at a time: minutes mean something is stuck.
ROUND_TIMEOUT = timedelta(minutes=4)


def build_gauges_dag(cfg: MaintenanceConfig, loaded: LoadedConfig) -> DAG:
    """The DAG ``crawler_ops_gauges``: one task that reads every crawl task's and executor's state and emits it."""
    with DAG(
        dag_id=cfg.gauges_dag_id,
        description="Metrics: per-task gauges (backlog, consumer lag, last success, run duration, parked)",
        tags=["crawler_ops", "metrics", *cfg.tags],
        doc_md=(
            "### crawler_ops gauges\n\nEmits, through Airflow's metrics (`[metrics]`), per crawl task: backlog "
            "(source total - watermark), stored and live totals, watermark, parked batches, seconds since the last "
            "successful run, the last run's duration and records/s, consumer lag per `kafka.consumer_groups` entry, "
            "and `scrape_errors` (lookups that failed this round); per executor: rows by status. See "
            "docs/operators-guide.md, Metrics."
        ),
        schedule=timetable(cfg.gauges_schedule, cfg.schedule_timezone),
        start_date=cfg.start_date,
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=ROUND_TIMEOUT + timedelta(minutes=1),
        default_args={"owner": "crawler_ops", "retries": 0, "execution_timeout": ROUND_TIMEOUT},
        is_paused_upon_creation=cfg.paused,
    ) as dag:

        @task(task_id="emit_gauges")
        def emit_gauges() -> dict:
            from crawler_ops.ops.gauges import emit_gauges

            return emit_gauges(loaded)

        emit_gauges()
    return dag


def build_gauges_dags(loaded: LoadedConfig | None = None) -> dict[str, DAG]:
    """The gauges DAG when ``maintenance.gauges_schedule`` is set (an invalid block shows on the maintenance DAG)."""
    loaded = loaded or load_config()
    cfg = loaded.maintenance
    if cfg is None or not cfg.enabled or cfg.gauges_schedule is None:
        return {}
    if get_parsing_context().dag_id not in (None, cfg.gauges_dag_id):
        return {}
    return {cfg.gauges_dag_id: build_gauges_dag(cfg, loaded)}
