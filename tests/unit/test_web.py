"""Unit tests of crawler_ops.web, the status app mounted in Airflow's api-server: a login is needed for every route,
and a user sees only the tasks whose DAG they may read. The auth manager and the status gathering (database, source,
Kafka) are fakes; in multi-team mode the DAG-to-team lookup is too."""

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
    """Lets each user read the DAG ids listed for them, the DAGs of the teams listed for them, or every DAG
    (``"*"``); keeps every question it was asked."""

    def __init__(self, readable: dict[str, set[str]], teams: dict[str, set[str]] | None = None) -> None:
        self.readable = readable
        self.teams = teams or {}
        self.calls: list[dict[str, Any]] = []

    def is_authorized_dag(self, *, method: str, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        self.calls.append({"method": method, "user": user.name, "access_entity": access_entity, "details": details})
        readable = self.readable.get(user.name, set())
        if method != "GET":
            return False
        if details is None:
            return "*" in readable
        in_team = details.team_name is not None and details.team_name in self.teams.get(user.name, set())
        return "*" in readable or details.id in readable or in_team


@pytest.fixture
def auth_manager() -> FakeAuthManager:
    return FakeAuthManager({"alice": {"crawl_open_task", "crawl_broken_open"}, "bob": set(), "root": {"*"}})


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, auth_manager: FakeAuthManager) -> Iterator[TestClient]:
    import airflow.api_fastapi.app as api_app

    config = tmp_path / "tasks.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: auth_manager)
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


TEAMS = {
    "crawl_open_task": "team_a",
    "crawl_broken_open": "team_a",
    "crawl_secret_task": "team_b",
    "crawl_broken_secret": "team_b",
}


@pytest.fixture
def multi_team(client: TestClient, auth_manager: FakeAuthManager, monkeypatch: pytest.MonkeyPatch) -> FakeAuthManager:
    """Airflow in multi-team mode: the open DAGs belong to team_a, the secret ones to team_b; carol is in team_a."""
    from airflow.models.dag import DagModel

    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    monkeypatch.setattr(
        DagModel,
        "get_dag_id_to_team_name_mapping",
        staticmethod(lambda dag_ids, session=None: {d: TEAMS[d] for d in dag_ids if d in TEAMS}),
    )
    auth_manager.teams = {"carol": {"team_a"}}
    return auth_manager


def test_in_multi_team_mode_a_team_member_sees_only_their_teams_tasks_and_config_errors(client, multi_team):
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    log_in("carol")

    report = client.get("/api/status").json()

    assert [row["task_id"] for row in report["tasks"]] == ["open_task"]
    assert [bad["task_id"] for bad in report["invalid_tasks"]] == ["broken_open"]
    asked = {(c["details"].id, c["details"].team_name, c["access_entity"]) for c in multi_team.calls}
    assert asked == {
        ("crawl_open_task", "team_a", DagAccessEntity.RUN),
        ("crawl_secret_task", "team_b", DagAccessEntity.RUN),
        ("crawl_broken_open", "team_a", None),
        ("crawl_broken_secret", "team_b", None),
    }, "task rows carry run details; config errors only name the DAG"


def test_without_multi_team_mode_dags_are_asked_about_with_no_team(client, auth_manager):
    log_in("alice")

    client.get("/api/status")

    calls = auth_manager.calls
    assert calls and all(c["details"].team_name is None for c in calls)


@pytest.mark.parametrize(
    ("user", "shows_the_yaml"), [("root", True), ("alice", False), ("bob", False)], ids=["all-dags", "some", "none"]
)
def test_a_config_that_does_not_load_is_explained_only_to_a_user_who_may_read_every_dag(
    client, tmp_path, user, shows_the_yaml
):
    (tmp_path / "tasks.yaml").write_text("tasks:\n  - {id: x, token: hunter2\n", encoding="utf-8")
    log_in(user)

    response = client.get("/api/status")

    assert response.status_code == 500
    detail = response.json()["detail"]
    assert ("hunter2" in detail) is shows_the_yaml
    if not shows_the_yaml:
        assert detail == web.GENERIC_CONFIG_ERROR
