"""Unit tests of crawler_ops.ops.listener: which failed DAG runs it takes up, and that it never raises."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from crawler_ops.crawl import commit
from crawler_ops.errors import StatusTableError
from crawler_ops.ops import listener
from crawler_ops.results import RunSummary
from crawler_ops.telemetry import notify


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Threads the listener starts, recorded (and not run)."""
    started: list[dict[str, Any]] = []

    class RecordingThread:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

        def start(self) -> None:
            started.append(self.kwargs)

    monkeypatch.setattr(listener, "threading", SimpleNamespace(Thread=RecordingThread))
    return started


def failed_run(dag_id: str) -> SimpleNamespace:
    return SimpleNamespace(dag_id=dag_id, run_id="manual__2026-11-01")


@pytest.mark.parametrize(
    "dag_id", ["exec_area_addresses", "crawler_ops_maintenance", "sample_jobs_downstream", "my_crawl_x"]
)
def test_failed_runs_of_dags_that_are_not_crawls_are_ignored(threads, dag_id):
    listener.on_dag_run_failed(dag_run=failed_run(dag_id), msg="task failed")

    assert threads == []


def test_a_failed_crawl_run_is_closed_in_a_background_thread(threads):
    listener.on_dag_run_failed(dag_run=failed_run("crawl_jobs"), msg="marked failed")

    (thread,) = threads
    assert thread["target"] is listener.close_run and thread["daemon"] is True
    assert thread["args"] == ("crawl_jobs", "manual__2026-11-01", "marked failed")


@pytest.fixture
def closing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> dict[str, list[Any]]:
    """A config with task ``jobs``; what close_abandoned_run and notify_run are asked, recorded."""
    config = tmp_path / "tasks.yaml"
    config.write_text("tasks:\n  - id: jobs\n    kafka: {topic: jobs}\n    notify: {conn_id: hook}\n", encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    calls: dict[str, list[Any]] = {"close": [], "notify": [], "summary": [None]}

    def close(cfg: Any, run_id: str, reason: str) -> Any:
        calls["close"].append((cfg.id, run_id, reason))
        return calls["summary"][0]

    monkeypatch.setattr(commit, "close_abandoned_run", close)
    monkeypatch.setattr(notify, "notify_run", lambda *args: calls["notify"].append(args))
    return calls


def test_a_run_its_commit_already_reported_is_not_reported_again(closing):
    closing["summary"] = [None]  # the record was no longer 'running'

    listener.close_run("crawl_jobs", "r1", "marked failed")

    assert closing["close"] == [("jobs", "r1", "the DAG run failed without a commit: marked failed")]
    assert closing["notify"] == []


SUMMARY = RunSummary(task="jobs", run_id="r1", mode="first", status="failed", topic="jobs", ref_time="2026-11-01")


def test_a_run_left_running_is_closed_and_its_failure_sent(closing):
    closing["summary"] = [SUMMARY]

    listener.close_run("crawl_jobs", "r1", "marked failed")

    ((cfg, task_id, outcome, summary),) = closing["notify"]
    assert (cfg.conn_id, task_id, outcome, summary) == ("hook", "jobs", "failure", SUMMARY.to_dict())


def test_a_crawl_dag_no_longer_in_the_config_is_left_alone(closing):
    listener.close_run("crawl_gone", "r1", "marked failed")

    assert closing["close"] == [] and closing["notify"] == []


def test_a_failure_while_closing_is_logged_not_raised(closing, monkeypatch, caplog):
    def broken(*_args: Any) -> Any:
        raise RuntimeError("PostgreSQL is down")

    monkeypatch.setattr(commit, "close_abandoned_run", broken)

    listener.close_run("crawl_jobs", "r1", "marked failed")

    assert "could not close the record of crawl_jobs run r1" in caplog.text and "PostgreSQL is down" in caplog.text


def rolled_back_by_postgres(sqlstate_error: type[Exception]) -> StatusTableError:
    """The store's error for a transaction PostgreSQL rolled back, caused by psycopg's error."""
    try:
        raise sqlstate_error("deadlock detected")
    except sqlstate_error as cause:
        try:
            raise StatusTableError("task jobs: PostgreSQL failed: deadlock detected") from cause
        except StatusTableError as error:
            return error


@pytest.mark.parametrize(
    "error", [psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure], ids=["deadlock", "serialization"]
)
def test_a_close_rolled_back_by_postgres_is_tried_again_and_reported_once(closing, monkeypatch, error):
    answers: list[Any] = [rolled_back_by_postgres(error), SUMMARY]

    def close(cfg: Any, run_id: str, reason: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(commit, "close_abandoned_run", close)

    listener.close_run("crawl_jobs", "r1", "marked failed")

    assert answers == [] and [args[2:] for args in closing["notify"]] == [("failure", SUMMARY.to_dict())]


def test_a_close_that_keeps_being_rolled_back_gives_up_after_a_few_tries(closing, monkeypatch):
    calls: list[str] = []

    def close(cfg: Any, run_id: str, reason: str) -> Any:
        calls.append(run_id)
        raise rolled_back_by_postgres(psycopg.errors.DeadlockDetected)

    monkeypatch.setattr(commit, "close_abandoned_run", close)

    listener.close_run("crawl_jobs", "r1", "marked failed")

    assert calls == ["r1"] * listener.CLOSE_ATTEMPTS and closing["notify"] == []


def test_other_failures_are_not_tried_again(closing, monkeypatch):
    calls: list[str] = []

    def close(cfg: Any, run_id: str, reason: str) -> Any:
        calls.append(run_id)
        raise StatusTableError("task jobs: cannot connect to PostgreSQL")

    monkeypatch.setattr(commit, "close_abandoned_run", close)

    listener.close_run("crawl_jobs", "r1", "marked failed")

    assert calls == ["r1"] and closing["notify"] == []


# --- a crawl run starting: its source pool ---------------------------------------------------------------------------


def test_a_starting_crawl_run_has_its_source_pool_ensured_in_a_thread_and_other_dags_are_left_alone(threads):
    for dag_id in ("crawl_jobs_beijing", "exec_area_addresses", "crawler_ops_maintenance"):
        listener.on_dag_run_running(dag_run=failed_run(dag_id), msg="started")

    assert [(t["target"], t["args"]) for t in threads] == [(listener.ensure_pool, ("crawl_jobs_beijing",))]


def test_a_pool_that_cannot_be_created_is_logged_and_the_scheduler_goes_on(monkeypatch, caplog):
    from crawler_ops.ops import pools

    def broken(dag_id: str) -> None:
        raise RuntimeError("metadata DB is down")

    monkeypatch.setattr(pools, "ensure_pool_of", broken)

    listener.ensure_pool("crawl_jobs_beijing")

    assert "could not create the source pool of crawl_jobs_beijing; run crawler-ops pools --apply" in caplog.text
