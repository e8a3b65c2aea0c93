"""An Airflow listener (registered by the plugin): creates a crawl run's source pool when the run starts, and
closes crawl runs that end without their commit.

When the scheduler starts a crawl run, :func:`on_dag_run_running` creates the source connection's Airflow pool if it
is missing (:mod:`crawler_ops.ops.pools`), in the scheduler's process (which has the metadata DB), in a short-lived
thread: the run's first task (plan) needs the pool, and the scheduler leaves it scheduled until the pool exists.

A run marked failed in the UI or the REST API, or whose commit was killed, leaves its run record 'running'
and no one sends the failure webhook. Airflow calls :func:`on_dag_run_failed` in the process that failed the
run (api-server or scheduler); the work runs in a short-lived thread so neither is held up by PostgreSQL or
the webhook. Runs their commit already reported are left alone (the record is no longer 'running').

Closing a run can deadlock with one of its workers still finishing a batch (both update the run record and the
run's batch rows); PostgreSQL then aborts one of the two transactions, and an aborted close is tried again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)
T = TypeVar("T")
CLOSE_ATTEMPTS = 3


@hookimpl
def on_dag_run_running(dag_run: Any, msg: str) -> None:
    dag_id = str(dag_run.dag_id)
    if dag_id.startswith("crawl_"):
        threading.Thread(target=ensure_pool, args=(dag_id,), name=f"crawler_ops-pool-{dag_id}", daemon=True).start()


def ensure_pool(dag_id: str) -> None:
    # In its own thread and session: the scheduler is not held up (its own transaction may still be open, which on
    # SQLite blocks other writers); until the pool exists, the scheduler only leaves the run's tasks scheduled.
    try:
        from crawler_ops.ops.pools import ensure_pool_of

        ensure_pool_of(dag_id)
    except Exception:  # a listener must never break the process that called it
        log.exception("crawler_ops: could not create the source pool of %s; run crawler-ops pools --apply", dag_id)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    dag_id, run_id = str(dag_run.dag_id), str(dag_run.run_id)
    if not dag_id.startswith("crawl_"):
        return
    if run_by_dag_test(dag_run):
        # `airflow dags test` exits as soon as the run ends, which would kill a daemon thread mid-close: the
        # process runs nothing else, so close the record before returning.
        close_run(dag_id, run_id, msg)
        return
    threading.Thread(target=close_run, args=(dag_id, run_id, msg), name=f"crawler_ops-{dag_id}", daemon=True).start()


def run_by_dag_test(dag_run: Any) -> bool:
    """Whether ``dag_run`` is run by ``dag.test()`` (``airflow dags test``), in the process that reports it."""
    triggered_by = getattr(dag_run, "triggered_by", None)
    return getattr(triggered_by, "value", triggered_by) == "test"


def close_run(dag_id: str, run_id: str, msg: str) -> None:
    from crawler_ops.config import load_config
    from crawler_ops.crawl.commit import close_abandoned_run
    from crawler_ops.telemetry.notify import notify_run

    try:
        cfg = next((t for t in load_config().tasks if t.dag_id == dag_id), None)
        if cfg is None:
            return
        reason = f"the DAG run failed without a commit: {msg}"
        summary = retry_rolled_back(lambda: close_abandoned_run(cfg, run_id, reason), f"{dag_id} run {run_id}")
        if summary is not None:
            notify_run(cfg.notify, cfg.id, "failure", summary.to_dict())
    except Exception:  # a listener must never break the process that called it
        log.exception("crawler_ops: could not close the record of %s run %s", dag_id, run_id)


def retry_rolled_back(step: Callable[[], T], what: str) -> T:
    """Run ``step``; run it again when PostgreSQL rolled its transaction back (a deadlock or a serialization
    failure, SQLSTATE class 40): the other transaction has then gone on, and a second try finds no conflict."""
    for _ in range(CLOSE_ATTEMPTS - 1):
        try:
            return step()
        except Exception as exc:
            if not rolled_back(exc):
                raise
            log.warning("crawler_ops: closing %s was rolled back (%s); trying again", what, exc)
    return step()


def rolled_back(exc: BaseException) -> bool:
    """Whether ``exc`` or one of its causes is PostgreSQL rolling the transaction back (SQLSTATE 40xxx)."""
    cause: BaseException | None = exc
    while cause is not None:
        if str(getattr(cause, "sqlstate", None) or "").startswith("40"):
            return True
        cause = cause.__cause__
    return False
