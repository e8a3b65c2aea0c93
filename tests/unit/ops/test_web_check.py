"""The status view's "Check source" action: who may start a check, one check per task at a time with its answer
given again for a while, at most two at once and one per user without holding the api-server's threads, the page
and the JSON. The routes, the cache and the permission checks run for real;
``check_within`` is a stand-in that counts the checks (the check itself runs on the real stack in
tests/integration/test_check.py and test_ui_browser.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crawler_ops.ops import check_runner, report_cache, web
from tests.unit.ops.test_web import FakeAuthManager, log_in

CONFIG = """
tasks:
  - {id: open_task, kafka: {topic: open}}
  - {id: secret_task, kafka: {topic: secret}}
""" + "".join(f"  - {{id: many_{i}, kafka: {{topic: many}}}}\n" for i in range(42))


class CountingCheck:
    """Stands in for ``check_within``: counts the checks per task; each waits for ``release`` when it is set."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release: threading.Event | None = None

    def __call__(self, cfg: Any, seconds: float) -> dict[str, Any]:
        self.calls.append(cfg.id)
        if self.release is not None:
            assert self.release.wait(30), "the test never released the check"
        return {
            "task": cfg.id,
            "source": cfg.source.conn_id,
            "checked_at": "2026-12-02T00:00:00+00:00",
            "total": {"value": 10, "how": "count endpoint", "requests": 1},
            "page": {"where": "offsets [0, 10)", "records_path": "data.data", "records": 10, "suggested_paths": []},
            "requests": 2,
            "sample_message": {"topic": "open", "key": "k<1>", "headers": [["crawl_task", cfg.id]], "value": "{}"},
            "problems": ["keys repeat on one page (<b>x</b>)"],
            "exit_code": 1,
        }


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[CountingCheck]:
    """eve may read the runs of crawl_open_task and the crawl_many_* DAGs; ann and bob those of every DAG."""
    import airflow.api_fastapi.app as api_app

    (tmp_path / "tasks.yaml").write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(tmp_path / "tasks.yaml"))
    many = {f"crawl_many_{i}" for i in range(42)}
    readers = {"eve": {"crawl_open_task", *many}, "ann": {"*"}, "bob": {"*"}, "cid": {"*"}}
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: FakeAuthManager(readers))
    monkeypatch.setattr(web, "CHECKS", check_runner.CheckRunner(ttl_s=web.CHECK_TTL_S, most=web.MAX_CHECKS))
    counting = CountingCheck()
    monkeypatch.setattr(web, "check_within", counting)
    log_in("eve")
    yield counting
    web.app.dependency_overrides.clear()


def test_a_check_needs_a_login(monkeypatch, tmp_path):
    (tmp_path / "tasks.yaml").write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(tmp_path / "tasks.yaml"))
    response = TestClient(web.app).post("/check", params={"task": "open_task"})
    assert response.status_code == 401


@pytest.mark.parametrize("task", ["secret_task", "no_such_task"])
def test_a_task_the_user_may_not_read_is_not_checked(checks, task):
    for path in ("/check", "/api/check"):
        response = TestClient(web.app).post(path, params={"task": task})
        assert response.status_code == 404 and f"no crawl task '{task}' visible to you" in response.text
    assert checks.calls == []


def test_the_page_shows_the_report_escaped_and_the_json_is_the_report(checks):
    client = TestClient(web.app)
    page = client.post("/check", params={"task": "open_task"})

    assert page.status_code == 200
    assert 'data-exit-code="1"' in page.text
    assert "keys repeat on one page (&lt;b&gt;x&lt;/b&gt;)" in page.text and "<b>x</b>" not in page.text
    assert "key: k&lt;1&gt;" in page.text and "crawl_task: open_task" in page.text
    assert "form-action 'self'" in page.headers["content-security-policy"]
    assert client.post("/api/check", params={"task": "open_task"}).json()["problems"] == [
        "keys repeat on one page (<b>x</b>)"
    ]
    assert checks.calls == ["open_task"], "the second question was answered from the cache"


def test_clicks_while_a_check_runs_wait_for_that_check(checks):
    """A click storm on one task makes one check: the others wait for its answer, then get it from the cache."""
    checks.release = threading.Event()
    client = TestClient(web.app)
    with ThreadPoolExecutor(6) as pool:
        answers = [pool.submit(client.post, "/api/check", params={"task": "open_task"}) for _ in range(6)]
        checks.release.set()
        codes = [answer.result(timeout=60).status_code for answer in answers]
    assert codes == [200] * 6
    assert client.post("/check", params={"task": "open_task"}).status_code == 200
    assert checks.calls == ["open_task"]


def test_a_form_posted_from_another_site_is_refused(checks):
    for site in ("cross-site", "same-site"):
        response = TestClient(web.app).post("/check", params={"task": "open_task"}, headers={"Sec-Fetch-Site": site})
        assert response.status_code == 403
    assert checks.calls == []


def test_the_status_page_of_a_task_has_the_check_button(monkeypatch, checks):
    monkeypatch.setattr(web, "REPORTS", report_cache.ReportCache(ttl_s=0.0))
    row = {"task_id": "open_task", "task_name": "open", "dag_id": "crawl_open_task", "history": {"runs": []}}
    report = {"generated_at": "now", "tasks": [row], "invalid_tasks": [], "executors": [], "invalid_executors": []}
    monkeypatch.setattr(web, "collect", lambda *args, **kwargs: report)
    page = TestClient(web.app).get("/", params={"dag_id": "crawl_open_task", "live": "false"}).text
    assert '<form method="post" action="check?task=open_task"' in page
    assert 'data-testid="check-source"' in page


def test_a_flood_of_checks_from_one_viewer_runs_one_and_holds_no_thread_of_the_server(checks, monkeypatch):
    """42 checks of 42 tasks at once from one viewer: one runs, the others are refused at once (429), and the
    server's own sync routes answer meanwhile (the check holds none of its threads)."""
    monkeypatch.setattr(web, "REPORTS", report_cache.ReportCache(ttl_s=0.0))
    report = {"generated_at": "now", "tasks": [], "invalid_tasks": [], "executors": [], "invalid_executors": []}
    monkeypatch.setattr(web, "collect", lambda *args, **kwargs: report)
    checks.release = threading.Event()
    client = TestClient(web.app)
    with ThreadPoolExecutor(42) as pool:
        first = pool.submit(client.post, "/api/check", params={"task": "many_0"})
        while not checks.calls:
            time.sleep(0.01)
        started = time.monotonic()
        rest = [pool.submit(client.post, "/api/check", params={"task": f"many_{i}"}) for i in range(1, 42)]
        codes = [answer.result(timeout=10).status_code for answer in rest]
        refused_in = time.monotonic() - started
        # A sync route of the same server, while the check still runs.
        status = client.get("/api/status", params={"live": "false"}).status_code
        checks.release.set()
        assert first.result(timeout=10).status_code == 200

    assert codes == [429] * 41 and status == 200
    assert refused_in < 5.0, f"the refusals took {refused_in:.1f}s: they waited"
    assert checks.calls == ["many_0"]


def test_at_most_two_checks_run_at_once_and_a_third_is_refused_at_once(checks):
    checks.release = threading.Event()
    client = TestClient(web.app)
    with ThreadPoolExecutor(3) as pool:
        running = []
        for user, task in (("ann", "open_task"), ("bob", "secret_task")):
            log_in(user)
            running.append(pool.submit(client.post, "/api/check", params={"task": task}))
            while len(checks.calls) < len(running):
                time.sleep(0.01)
        log_in("cid")
        third = client.post("/api/check", params={"task": "many_1"})
        joined = pool.submit(client.post, "/api/check", params={"task": "open_task"})  # the same check: awaits it
        checks.release.set()
        assert [r.result(timeout=10).status_code for r in running] == [200, 200]
        assert joined.result(timeout=10).status_code == 200

    assert third.status_code == 503 and third.headers["retry-after"] == "10"
    assert checks.calls == ["open_task", "secret_task"]
