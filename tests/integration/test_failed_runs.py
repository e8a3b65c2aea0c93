"""Every crawl run that fails says why where operators look: `airflow dags test` of a run whose plan, chunk or commit
fails for a real reason leaves its run record 'failed' with an error naming the cause, and `crawler-ops status`
shows it on the task's last run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import REPO, cli, make_task, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def airflow_dags_test(dag_id: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`airflow dags test` in its own process, on this checkout's DAGs and plugins (the listener included)."""
    full_env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        **env,
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    return subprocess.run(
        [airflow, "dags", "test", dag_id, REF.isoformat()], env=full_env, capture_output=True, text=True, timeout=600
    )


def last_run_shown(task_id: str) -> dict[str, Any]:
    """The task's last run as `crawler-ops status --json` shows it (PostgreSQL only)."""
    shown = cli("status", "--task", task_id, "--json", "--no-live")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    (row,) = json.loads(shown.stdout)["tasks"]
    return dict(row["last_run"])


def assert_failed_with(task_id: str, pg_uri: str, run: subprocess.CompletedProcess[str], cause: str) -> None:
    assert run.returncode == 1, f"the DAG run should fail; exit {run.returncode}: {run.stderr[-3000:]}"
    record = run_record(pg_uri, task_id)
    assert record["status"] == "failed", f"run record left {record['status']}: {record}"
    assert record["finished_at"] is not None
    assert any(cause in error for error in record["errors"]), f"{cause!r} not among the errors {record['errors']}"
    shown = last_run_shown(task_id)
    assert shown["status"] == "failed" and shown["run_id"] == record["run_id"]
    assert cause in (shown["last_error"] or ""), f"the status view does not show the cause: {shown}"


def test_a_plan_failing_on_the_source_fails_the_run_record_with_the_source_error(source, pg_uri, unique_id, use_config):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    source.faults(unique_id, error_rate=1.0, error_status=403)  # count and pages answer 403 Forbidden
    cfg = make_task(unique_id)
    use_config(cfg)

    run = airflow_dags_test(cfg.dag_id)

    assert_failed_with(unique_id, pg_uri, run, "HTTP 403")
    assert run_record(pg_uri, unique_id)["errors"][0].startswith("plan: ")
    assert watermark(pg_uri, unique_id) is None


def test_a_chunk_whose_transform_is_broken_fails_the_run_record_with_the_transform_error(
    source, pg_uri, unique_id, use_config, tmp_path
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    module = f"broken_transform_{unique_id}"
    (tmp_path / f"{module}.py").write_text(
        'raise RuntimeError("the lookup table shipped with this transform is missing")\n\n'
        "def transform(record):\n    return record\n"
    )
    cfg = make_task(unique_id, transform=f"{module}.transform")
    use_config(cfg)

    run = airflow_dags_test(cfg.dag_id, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))

    assert_failed_with(unique_id, pg_uri, run, "the lookup table shipped with this transform is missing")
    record = run_record(pg_uri, unique_id)
    assert record["fetched"] == 0 and record["planned"] == 3
    assert watermark(pg_uri, unique_id) is None


def test_a_commit_refused_by_a_postgresql_constraint_fails_the_run_record_with_the_constraint(
    source, pg_uri, unique_id, use_config
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    use_config(cfg)
    constraint = f"refuse_{unique_id}"
    # This task's progress row only: other tests sharing the table are not affected.
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(
            f"ALTER TABLE crawler_ops.progress ADD CONSTRAINT {constraint} CHECK (task_id <> '{unique_id}') NOT VALID"
        )
    try:
        run = airflow_dags_test(cfg.dag_id)
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE crawler_ops.progress DROP CONSTRAINT {constraint}")

    assert_failed_with(unique_id, pg_uri, run, f'violates check constraint "{constraint}"')
    record = run_record(pg_uri, unique_id)
    assert any(error.startswith("commit: ") for error in record["errors"]), record["errors"]
    assert record["fetched"] == 300, "the chunks crawled; only the commit failed"
    assert watermark(pg_uri, unique_id) is None


def test_a_failed_dag_test_run_left_running_is_closed_by_the_listener_before_its_process_exits(
    source, pg_uri, unique_id, use_config
):
    """`airflow dags test` exits as soon as its run failed: the listener's close must not be left to a thread the
    exit kills. A run whose commit never closed its record (planned, then the run failed) is the case."""
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import plan_run

    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    use_config(cfg)
    run_id = "manual__listener-closes"
    plan_run(RunContext(cfg=cfg, run_id=run_id, ref=REF, params=RunParams()))
    assert run_record(pg_uri, unique_id)["status"] == "running"
    # What dag.test() calls in its own process when the run fails, then the process ends.
    script = (
        "import sys\n"
        "from types import SimpleNamespace\n"
        "from airflow.utils.types import DagRunTriggeredByType\n"
        "from crawler_ops.ops import listener\n"
        "run = SimpleNamespace(dag_id=sys.argv[1], run_id=sys.argv[2], triggered_by=DagRunTriggeredByType.TEST)\n"
        "listener.on_dag_run_failed(dag_run=run, msg='task_failure')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-c", script, cfg.dag_id, run_id], env=env, capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stderr[-3000:]
    record = run_record(pg_uri, unique_id)
    assert record["status"] == "failed", f"the record was left {record['status']} when the process exited"
    assert record["errors"] == ["the DAG run failed without a commit: task_failure"]
    assert last_run_shown(unique_id)["last_error"] == "the DAG run failed without a commit: task_failure"
