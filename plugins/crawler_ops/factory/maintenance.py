"""The retention DAG ``crawler_ops_maintenance``."""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, get_parsing_context, task

from crawler_ops.config import LoadedConfig, MaintenanceConfig, load_config
from crawler_ops.factory.common import build_broken_dag, dag_settings, timetable_for
from crawler_ops.ops import maintenance


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
