"""The DAG ``exec_<name>`` of each executor task: sync -> mapped workers -> summary."""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import DAG, TriggerRule, get_current_context, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from crawler_ops.config import ExecutorTaskConfig, LoadedConfig, load_config
from crawler_ops.crawl.run import pulled_results
from crawler_ops.factory.common import build_dags, dag_settings, timetable_for
from crawler_ops.operators.failures import no_retry_for_permanent_errors

log = logging.getLogger(__name__)


def build_executor_dag(cfg: ExecutorTaskConfig) -> DAG:
    """The DAG ``exec_<name>``: sync -> mapped workers -> summary."""
    with DAG(
        dag_id=cfg.dag_id,
        description=f"Run {cfg.function} over {cfg.source_table} (status in {cfg.status_table})",
        tags=["crawler_ops", "executor", *cfg.tags],
        doc_md=doc_for(cfg),
        schedule=timetable_for(cfg),
        **dag_settings(cfg),
    ) as dag:

        @task(task_id="sync")
        def sync() -> dict[str, int]:
            from crawler_ops import executor  # the step's clients load when it runs, not when the file is parsed

            return no_retry_for_permanent_errors(lambda: executor.sync_rows(cfg))

        @task(task_id="work", map_index_template="{{ worker_label | default('worker') }}")
        def work(worker: int, **context: Any) -> dict[str, int]:
            get_current_context()["worker_label"] = f"worker {worker}"  # type: ignore[typeddict-unknown-key]
            from crawler_ops import executor

            return no_retry_for_permanent_errors(lambda: executor.run_worker(cfg, context["run_id"], worker))

        @task(task_id="summary", trigger_rule=TriggerRule.ALL_DONE)
        def summary(**context: Any) -> dict[str, Any]:
            from crawler_ops import executor

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


def doc_for(cfg: ExecutorTaskConfig) -> str:
    if cfg.all_categories:
        scope = " (every category, taking turns)"
    else:
        scope = f" (category {cfg.category})" if cfg.category else ""
    style = " (legacy style)" if cfg.function_style == "legacy" else ""
    isolation = ", each call in a child process" if cfg.isolation == "process" else ""
    return (
        f"### executor {cfg.name}\n\n**sync** adds new ids of `{cfg.source_table}`{scope} to `{cfg.status_table}`; "
        f"**work** runs {cfg.workers} workers that claim rows (lease {cfg.period}s, renewed while a call runs) and "
        f"call `{cfg.function}`{style} on up to {cfg.cycle_index} rows in all{isolation}; **summary** counts rows "
        "per status. Parked rows: `python -m crawler_ops unpark --executor " + cfg.name + "`."
    )


def build_executor_dags(loaded: LoadedConfig | None = None) -> dict[str, DAG]:
    """All executor DAGs ``exec_<name>`` of the config."""
    loaded = loaded or load_config(check_imports=True)
    return build_dags(loaded.executors, loaded.executor_errors, build_executor_dag, "exec_")
