"""What the status app's routes ask the status gathering for: the question (task, executor, live, history) and the
deadline a request is answered by, and the 404 of an executor the user may not read. The routes, the report cache
and the permission checks run for real; ``collect`` is a stand-in that records each call and answers for every
entry it was asked about, as the real one does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from crawler_ops.config import LoadedConfig
from crawler_ops.ops import report_cache, web
from tests.unit.ops.test_web import EXECUTORS_CONFIG, FakeAuthManager, log_in

# How long a test waits for an answer the route should give at once (its deadline is spent); never reached unless
# the route waits for a build slot past its deadline.
ANSWER_WAIT_S = 30.0


class RecordingCollect:
    """Stands in for ``status.collect``: records each question as asked (the arguments given, no defaults) and answers
    it with one minimal row per entry asked about (a task id or an executor name narrows it, as in the real one)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, loaded: LoadedConfig, task_id: str | None = None, **asked: Any) -> dict[str, Any]:
        self.calls.append({"task_id": task_id, **asked})
        executor = asked.get("executor")
        tasks = [t.id for t in loaded.tasks if executor is None and task_id in (None, t.id)]
        executors = [e.name for e in loaded.executors if task_id is None and executor in (None, e.name)]
        return {
            "generated_at": "2026-12-01T00:00:00+00:00",
            "tasks": [{"task_id": t} for t in tasks],
            "invalid_tasks": [],
            "executors": [{"name": e, "dag_id": f"exec_{e}", "status_table": "s.st", "rows": {}} for e in executors],
            "invalid_executors": [],
        }


@pytest.fixture
def collect(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[RecordingCollect]:
    """eve may read the runs of crawl_open_task and exec_open_exec, nothing else; every report is gathered anew."""
    import airflow.api_fastapi.app as api_app

    (tmp_path / "tasks.yaml").write_text(EXECUTORS_CONFIG, encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(tmp_path / "tasks.yaml"))
    readers = FakeAuthManager({"eve": {"crawl_open_task", "exec_open_exec"}})
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: readers)
    monkeypatch.setattr(web, "REPORTS", report_cache.ReportCache(ttl_s=0.0))
    recording = RecordingCollect()
    monkeypatch.setattr(web, "collect", recording)
    log_in("eve")
    yield recording
    web.app.dependency_overrides.clear()


def asked(client: TestClient, path: str, params: dict[str, str]) -> tuple[Any, float, float]:
    before = time.monotonic()
    response = client.get(path, params=params)
    return response, before, time.monotonic()


@pytest.mark.parametrize(
    ("path", "params", "question"),
    [
        ("/api/status", {}, {"task_id": None, "executor": None, "live": True, "history": False}),
        ("/api/status", {"live": "false"}, {"task_id": None, "executor": None, "live": False, "history": False}),
        (
            "/api/status",
            {"task": "open_task", "history": "true"},
            {"task_id": "open_task", "executor": None, "live": True, "history": True},
        ),
        ("/", {"live": "false"}, {"task_id": None, "executor": None, "live": False, "history": True}),
        (
            "/",
            {"dag_id": "exec_open_exec", "live": "false"},
            {"task_id": None, "executor": "open_exec", "live": False, "history": True},
        ),
        ("/", {"dag_id": "crawl_open_task"}, {"task_id": "open_task", "executor": None, "live": True, "history": True}),
    ],
    ids=["json", "json-not-live", "json-one-task-history", "page-not-live", "executor-dag-tab", "crawl-dag-tab"],
)
def test_each_route_asks_for_its_question_to_be_answered_by_the_status_deadline(collect, path, params, question):
    response, before, after = asked(TestClient(web.app), path, params)

    assert response.status_code == 200, response.text
    (call,) = collect.calls
    assert {k: call.get(k) for k in question} == question
    assert call.get("end") is not None, "a report in the api-server is answered within the deadline"
    assert before + web.STATUS_DEADLINE_S <= call["end"] <= after + web.STATUS_DEADLINE_S


def test_the_dag_tab_of_an_executor_shows_its_row_only(collect):
    page = TestClient(web.app).get("/", params={"dag_id": "exec_open_exec"}).text

    assert '<tr data-executor="open_exec">' in page and "secret_exec" not in page
    assert "is not a crawl or executor DAG" not in page


def test_the_dag_tab_of_an_executor_the_user_may_not_read_says_it_is_not_theirs(collect):
    page = TestClient(web.app).get("/", params={"dag_id": "exec_secret_exec"})

    assert page.status_code == 200
    assert "exec_secret_exec is not a crawl or executor DAG of crawler_ops that you may read" in page.text
    assert "data-executor" not in page.text, "no row of the executor gathered for it"
    assert [call["executor"] for call in collect.calls] == ["secret_exec"]


def test_asking_for_an_executor_one_may_not_read_is_a_404_naming_the_executor(collect):
    with pytest.raises(HTTPException) as caught:
        web.visible_report(SimpleNamespace(name="eve"), None, False, executor="secret_exec")

    assert (caught.value.status_code, caught.value.detail) == (404, "no executor 'secret_exec' visible to you")


def test_a_question_without_live_calls_whose_build_slots_are_all_taken_is_answered_busy_by_its_deadline(
    collect, monkeypatch
):
    """The deadline reaches the report cache: a request does not wait for a build slot past it."""
    monkeypatch.setattr(web, "STATUS_DEADLINE_S", 0.0)
    monkeypatch.setattr(web, "REPORTS", report_cache.ReportCache(max_builds=1))
    client = TestClient(web.app)
    released = threading.Event()
    web.REPORTS.builds.acquire()
    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.get, "/api/status", params={"live": "false"})
            try:
                response = answer.result(timeout=ANSWER_WAIT_S)
            except FutureTimeout:
                web.REPORTS.builds.release()
                released.set()
                pytest.fail(f"the request still waited for a build slot {ANSWER_WAIT_S}s after its deadline")
    finally:
        if not released.is_set():
            web.REPORTS.builds.release()

    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert response.json()["detail"].startswith("busy: 1 status reports are being gathered")
    assert collect.calls == []
