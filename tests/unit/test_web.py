"""Unit tests of crawler_ops.web, the status app mounted in Airflow's api-server: a login is needed for every route,
and a user sees only the tasks whose DAG they may read. The auth manager and the status gathering (database, source,
Kafka) are fakes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crawler_ops import status, web

CONFIG = """
tasks:
  - {id: open_task, name: 公开, kafka: {topic: open}}
  - {id: secret_task, kafka: {topic: secret}}
  - {id: broken_open, batch_size: 0, kafka: {topic: b1}}
  - {id: broken_secret, batch_size: 0, kafka: {topic: b2}}
"""


class FakeAuthManager:
    """Lets each user read exactly the DAG ids listed for them."""

    def __init__(self, readable: dict[str, set[str]]) -> None:
        self.readable = readable

    def is_authorized_dag(self, *, method: str, details: Any, user: Any) -> bool:
        return method == "GET" and details.id in self.readable.get(user.name, set())


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[TestClient]:
    import airflow.api_fastapi.app as api_app

    config = tmp_path / "tasks.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    manager = FakeAuthManager({"alice": {"crawl_open_task", "crawl_broken_open"}, "bob": set()})
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: manager)
    monkeypatch.setattr(status, "active_runs", lambda dag_ids: ({}, None))
    monkeypatch.setattr(web, "REPORTS", web.ReportCache())
    monkeypatch.setattr(status, "stored_status", lambda cfg: {"watermark": 40, "status": "incomplete"})
    monkeypatch.setattr(status, "source_total", lambda cfg, end=None: {"source_total": 50})
    monkeypatch.setattr(status, "kafka_status", lambda cfg, end=None: {"messages": 40, "groups": {}})
    yield TestClient(web.app)
    web.app.dependency_overrides.clear()


def log_in(name: str) -> None:
    web.app.dependency_overrides[web.current_user] = lambda: SimpleNamespace(name=name)


@pytest.mark.parametrize("path", ["/api/status", "/"])
def test_every_route_needs_a_login(client, path):
    response = client.get(path)

    assert response.status_code == 401 and response.json() == {"detail": "Not authenticated"}


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_there_are_no_open_docs_or_schema(client, path):
    assert client.get(path).status_code == 404


def test_a_user_sees_only_the_tasks_and_config_errors_of_dags_they_may_read(client):
    log_in("alice")

    report = client.get("/api/status").json()

    assert [row["task_id"] for row in report["tasks"]] == ["open_task"]
    assert [bad["task_id"] for bad in report["invalid_tasks"]] == ["broken_open"]


def test_a_user_who_may_read_no_dag_sees_nothing(client):
    log_in("bob")

    report = client.get("/api/status").json()

    assert (report["tasks"], report["invalid_tasks"]) == ([], [])


@pytest.mark.parametrize("task", ["secret_task", "no_such_task"], ids=["not-readable", "unknown"])
def test_asking_for_a_task_one_may_not_read_is_the_same_404_as_an_unknown_one(client, task):
    log_in("alice")

    response = client.get("/api/status", params={"task": task})

    assert response.status_code == 404
    assert response.json()["detail"] == f"no crawl task '{task}' visible to you"


def test_the_html_page_has_one_row_per_visible_task_with_its_fields(client):
    log_in("alice")

    page = client.get("/")

    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    table = page.text.split("<table>")[1].split("</table>")[0]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in table.split("<tr>") if "<td>" in row]
    assert len(rows) == 1
    cells = rows[0]
    assert cells[0] == "open_task<br><small>公开</small>"
    assert cells[1] == "no" and cells[2] == "incomplete" and cells[4] == "40 (80.0%)"
    assert "secret_task" not in page.text and "broken_secret" not in page.text
    assert "<b>broken_open</b>" in page.text


@pytest.mark.parametrize("path", ["/api/status", "/", "/docs"])
def test_every_answer_is_not_cached_not_sniffed_and_runs_no_script(client, path):
    log_in("alice")

    headers = client.get(path).headers

    assert headers["cache-control"] == "no-store" and headers["x-content-type-options"] == "nosniff"
    policy = headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy
    assert "frame-ancestors 'self'" in policy, "Airflow's own UI may frame the page, other origins may not"


def test_the_page_shows_the_source_database_and_running_errors_the_json_has():
    row = {
        "task_id": "t<1>",
        "task_name": "t",
        "running": None,
        "running_error": "OperationalError: <metadata down>",
        "status": "unknown",
        "db_error": "OperationalError: crawler db down",
        "source_total": None,
        "source_error": "SourceError: GET /api/t/count timed out after 5s",
        "watermark": None,
        "progress": "-",
    }
    page = web.render_html({"generated_at": "now", "tasks": [row], "invalid_tasks": []})

    assert "<td>SourceError: GET /api/t/count timed out after 5s</td>" in page, "not None in the source total cell"
    assert "database: OperationalError: crawler db down" in page
    assert "? OperationalError: &lt;metadata down&gt;" in page and "t&lt;1&gt;" in page
