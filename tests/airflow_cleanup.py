"""What a test session leaves in Airflow's metadata DB, and taking it out again.

``dag.test()`` writes every DAG the dags folder defines under the test's config into the metadata DB (the DAG, its
serialized versions, the run and its task instances); left there, the UI of a later ``make airflow-up`` lists them
all. (The services the scheduler and Celery tests start keep their own metadata DB, dropped when they stop.) Every
config a test points Airflow at is written below the session's pytest temp folder, so the session's DAGs are the DAG
ids those files define. Configured DAGs (``include/crawler_tasks.yaml``, the stack's ``$CRAWLER_OPS_CONFIG``, the
maintenance and gauges DAGs) are never deleted; of those, only the runs ``dag.test()`` made during the session are
removed.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crawler_ops.config import DEFAULT_CONFIG, ConfigError, LoadedConfig, MaintenanceConfig, broken_dag_id, load_config

log = logging.getLogger(__name__)


def config_dag_ids(loaded: LoadedConfig) -> set[str]:
    """Every DAG id the dags folder can build from ``loaded``: crawl and executor DAGs, the placeholders of invalid
    entries, the maintenance and gauges DAGs, and the sample downstream DAG of each crawl task."""
    ids = {t.dag_id for t in loaded.tasks} | {e.dag_id for e in loaded.executors}
    ids |= {broken_dag_id(label) for label in loaded.errors}
    ids |= {broken_dag_id(label, "exec_") for label in loaded.executor_errors}
    ids |= {f"sample_{t.id}_downstream" for t in loaded.tasks}
    maintenance = loaded.maintenance or MaintenanceConfig()
    return ids | {maintenance.dag_id, maintenance.gauges_dag_id}


def configured_dag_ids(configs: Iterable[Path] = ()) -> set[str]:
    """The DAG ids of the repository's config and of ``configs`` (those that exist): never deleted."""
    ids = config_dag_ids(LoadedConfig(tasks=(), errors={}))
    for path in {DEFAULT_CONFIG, *configs}:
        if path.exists():
            ids |= config_dag_ids(load_config(path))
    return ids


def session_dag_ids(temp_root: Path) -> set[str]:
    """The DAG ids the YAML configs below ``temp_root`` define (a file that is no valid config defines none)."""
    ids: set[str] = set()
    for path in sorted(p for p in temp_root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()):
        try:
            ids |= config_dag_ids(load_config(path))
        except ConfigError:
            continue
    return ids


def last_run_id() -> int:
    """The newest DAG run's id in the metadata DB (0 when there is none)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return int(session.scalar(select(func.max(DagRun.id))) or 0)


@dataclass
class CleanupReport:
    deleted: list[str] = field(default_factory=list)
    kept_configured: list[str] = field(default_factory=list)
    test_runs_deleted: int = 0
    import_errors_deleted: int = 0
    failures: list[str] = field(default_factory=list)


def clean_metadata_db(
    candidates: Iterable[str], protected: set[str], temp_root: Path, runs_after: int | None
) -> CleanupReport:
    """Delete the DAGs ``candidates`` names (with their runs, task instances, serialized versions) except the
    ``protected`` ones; of protected ones, delete the finished runs ``dag.test()`` made with an id above
    ``runs_after``; and delete import errors that name a file below ``temp_root``."""
    from airflow.api.common.delete_dag import delete_dag
    from airflow.exceptions import DagNotFound
    from airflow.models.dagrun import DagRun
    from airflow.models.errors import ParseImportError
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType
    from sqlalchemy import delete

    report = CleanupReport()
    wanted = set(candidates)
    for dag_id in sorted(wanted):
        if dag_id in protected:
            report.kept_configured.append(dag_id)
            continue
        try:
            with create_session() as session:
                delete_dag(dag_id, keep_records_in_log=False, session=session)
            report.deleted.append(dag_id)
        except DagNotFound:
            continue
        except Exception as exc:  # noqa: BLE001 - reported; the other DAGs are still deleted
            report.failures.append(f"{dag_id}: {type(exc).__name__}: {exc}")
    with create_session() as session:
        if runs_after is not None and report.kept_configured:
            finished = delete(DagRun).where(
                DagRun.dag_id.in_(report.kept_configured),
                DagRun.triggered_by == DagRunTriggeredByType.TEST,
                DagRun.id > runs_after,
                DagRun.state.in_([DagRunState.SUCCESS, DagRunState.FAILED]),
            )
            report.test_runs_deleted = session.execute(finished.execution_options(synchronize_session=False)).rowcount
        errors = delete(ParseImportError).where(ParseImportError.stacktrace.contains(str(temp_root)))
        report.import_errors_deleted = session.execute(errors.execution_options(synchronize_session=False)).rowcount
    return report


def main(argv: list[str] | None = None) -> int:
    """Delete the DAGs of the test configs below the given folders, e.g. the temp folders earlier sessions left
    (``/tmp/pytest-of-$USER``); the Airflow environment (``source .stack/env.sh``) says which metadata DB."""
    parser = argparse.ArgumentParser(prog="python -m tests.airflow_cleanup", description=main.__doc__)
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    stack_config = os.environ.get("CRAWLER_OPS_CONFIG")
    protected = configured_dag_ids([Path(stack_config)] if stack_config else [])
    failed = False
    for folder in args.folders:
        report = clean_metadata_db(session_dag_ids(folder), protected, folder, None)
        print(f"{folder}: deleted {len(report.deleted)} DAGs, {report.import_errors_deleted} import errors")
        for failure in report.failures:
            print(f"  failed: {failure}")
        failed = failed or bool(report.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
