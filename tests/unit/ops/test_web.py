"""Unit tests of crawler_ops.ops.web, the status app mounted in Airflow's api-server: a login is needed for every route,
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

from crawler_ops.ops import report_cache, status, web

CONFIG = """
tasks:
  - {id: open_task, name: 公开, kafka: {topic: open}}
  - {id: secret_task, kafka: {topic: secret}}
  - {id: broken_open, batch_size: 0, kafka: {topic: b1}}
  - {id: broken_secret, batch_size: 0, kafka: {topic: b2}}
"""


HOSTILE = "<script>alert(1)</script>"


def history(task_id: str, runs: int = 5) -> dict[str, Any]:
    """A task's run history as status.run_history gives it: ``runs`` finished runs, oldest first, the second
    without a duration (no records/s) and the first without a committed watermark (no backlog); and a run in
    progress with 3 of 4 batches done."""
    return {
        "current_run": {
            "run_id": f"manual__{task_id}",
            "mode": "incremental",
            "started_at": "2026-12-01T06:00:00+00:00",
            "planned": 4,
            "done": 3,
            "percent": 75.0,
        },
        "runs": [
            {
                "run_id": f"run{i}",
                "mode": "incremental",
                "status": "success",
                "started_at": f"2026-11-{10 + i}T00:00:00+00:00",
                "duration_s": None if i == 1 else 2.0,
                "fetched": 100 * (i + 1),
                "kept": 50 * (i + 1),
                "published": 50 * (i + 1),
                "backlog": None if i == 0 else 1000 - 100 * i,
                "records_per_s": None if i == 1 else 50.0 * (i + 1),
            }
            for i in range(runs)
        ],
    }


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
    monkeypatch.setattr(web, "REPORTS", report_cache.ReportCache())
    monkeypatch.setattr(status, "stored_status", lambda cfg: {"watermark": 40, "status": "incomplete"})
    monkeypatch.setattr(status, "source_total", lambda cfg, end=None: {"source_total": 50})
    monkeypatch.setattr(status, "kafka_status", lambda cfg, end=None: {"messages": 40, "groups": {}})
    monkeypatch.setattr(status, "run_history", lambda cfg: history(cfg.id))
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


def cells(page: str) -> list[dict[str, str]]:
    """The summary table's cells per task row, by field name."""
    table = page.split('<table class="tasks">')[1].split("</table>")[0]
    rows = [row for row in table.split("<tr") if "<td" in row]
    return [dict(re.findall(r'<td data-field="(\w+)">(.*?)</td>', row, re.S)) for row in rows]


def test_the_html_page_has_one_row_per_visible_task_with_its_fields(client):
    log_in("alice")

    page = client.get("/")

    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    rows = cells(page.text)
    assert len(rows) == 1
    row = rows[0]
    assert row["task"] == '<a href="?task=open_task">open_task</a><br><small>公开</small>'
    assert (row["running"], row["status"], row["watermark"]) == ("no", "incomplete", "40 (80.0%)")
    assert "secret_task" not in page.text and "broken_secret" not in page.text
    assert "<b>broken_open</b>" in page.text
    assert "No run in progress." in page.text, "a run record left running by a DAG run that ended is no progress"


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

    shown = cells(page)[0]
    assert shown["source_total"] == "SourceError: GET /api/t/count timed out after 5s", "not None"
    assert shown["status"] == "database: OperationalError: crawler db down"
    assert shown["running"] == "? OperationalError: &lt;metadata down&gt;" and "t&lt;1&gt;" in shown["task"]


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
    monkeypatch.setattr(web, "parsed_dags", lambda dag_ids: {d for d in dag_ids if d in TEAMS})
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


def points(page: str, chart: str) -> dict[str, int]:
    """Points drawn per series in the chart ``chart`` of the page (circles, and the polyline's coordinates)."""
    svg = page.split(f'<svg class="chart" data-chart="{chart}"')[1].split("</svg>")[0]
    circles = re.findall(r'<circle class="point" data-series="([^"]+)"', svg)
    lines = dict(re.findall(r'<polyline class="series" data-series="([^"]+)" points="([^"]*)"', svg))
    counted = {name: circles.count(name) for name in lines}
    assert counted == {name: len(coords.split()) for name, coords in lines.items()}, "a circle on every vertex"
    return counted


@pytest.fixture
def running(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow runs every task's DAG now."""
    monkeypatch.setattr(status, "active_runs", lambda dag_ids: ({d: [f"manual__{d}"] for d in dag_ids}, None))


def test_the_page_draws_each_tasks_history_as_svg_charts_with_one_point_per_run_that_has_a_value(client, running):
    log_in("alice")

    page = client.get("/").text

    assert points(page, "records_per_s") == {"records/s": 4}, "the run without a duration leaves a gap"
    assert points(page, "kept_published") == {"kept": 5, "published": 5}
    assert points(page, "backlog") == {"backlog": 4}, "the run without a watermark leaves a gap"
    assert page.count('data-runs="5"') == 3
    assert "<b>75.0%</b>" in page and "3 of 4 batches done" in page


def test_a_chart_of_one_run_puts_its_point_in_the_middle(client, monkeypatch):
    monkeypatch.setattr(status, "run_history", lambda cfg: history(cfg.id, runs=1))
    log_in("alice")

    page = client.get("/").text

    assert points(page, "kept_published") == {"kept": 1, "published": 1}
    assert 'cx="160.0"' in page


def test_hostile_strings_from_config_runs_and_errors_are_escaped_everywhere():
    run = {
        "run_id": HOSTILE,
        "mode": "incremental",
        "status": "failed",
        "duration_s": 1,
        "fetched": 1,
        "kept": 1,
        "published": 1,
        "dead_lettered": 0,
    }
    found = history("x")
    found["runs"][2]["run_id"] = HOSTILE
    found["current_run"]["run_id"] = HOSTILE
    row = {
        "task_id": HOSTILE,
        "task_name": HOSTILE,
        "dag_id": HOSTILE,
        "running": None,
        "running_error": HOSTILE,
        "status": HOSTILE,
        "watermark": 1,
        "progress": "1%",
        "last_run": run,
        "errors_24h": {"records": 1, "batches": 1, "latest": HOSTILE},
        "parked": [HOSTILE],
        "kafka": {"messages": 1, "groups": {HOSTILE: {"error": HOSTILE}}},
        "history": found,
    }
    report = {
        "generated_at": HOSTILE,
        "tasks": [row],
        "invalid_tasks": [{"task_id": HOSTILE, "error": HOSTILE}],
        "executors": [
            {
                "name": HOSTILE,
                "dag_id": HOSTILE,
                "status_table": HOSTILE,
                "rows": {HOSTILE: 1},
                "parked": [{"id": 1, "attempts": 3, "failed_at": HOSTILE, "last_error": HOSTILE}],
            }
        ],
        "invalid_executors": [{"name": HOSTILE, "error": HOSTILE}],
    }

    page = web.render_html(report, dag_id=HOSTILE, note=HOSTILE)

    assert "<script" not in page.lower()
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 20
    assert "?task=%3Cscript%3Ealert%281%29%3C/script%3E" in page, "the task link's query is URL-encoded"


@pytest.mark.parametrize(
    "params", [{}, {"task": "open_task"}, {"dag_id": "crawl_open_task"}, {"dag_id": "other"}], ids=str
)
def test_every_link_of_the_page_is_relative_so_it_works_under_a_base_url_path(client, params):
    log_in("alice")

    page = client.get("/", params=params).text

    targets = re.findall(r'(?:href|src|action)="([^"]*)"', page)
    assert targets, "the page links to its JSON at least"
    assert all(not t.startswith(("/", "http:", "https:")) and "//" not in t for t in targets), targets


def test_the_dag_tab_of_a_crawl_dag_shows_only_its_task_with_charts(client):
    log_in("alice")

    page = client.get("/", params={"dag_id": "crawl_open_task"})

    assert page.status_code == 200
    assert [row["task"].split(">")[1].split("<")[0] for row in cells(page.text)] == ["open_task"]
    assert "crawl_open_task" in page.text and '<svg class="chart"' in page.text
    assert "broken_open" not in page.text, "one DAG's tab shows no other config error"
    assert 'href="api/status?task=open_task"' in page.text


@pytest.mark.parametrize(
    "dag_id", ["crawler_ops_maintenance", "crawl_secret_task", "crawl_no_such_task", "exec_nothing"], ids=str
)
def test_the_dag_tab_of_another_or_unreadable_dag_says_it_is_not_a_crawl_dag(client, dag_id):
    log_in("alice")

    page = client.get("/", params={"dag_id": dag_id})

    assert page.status_code == 200
    assert f"{dag_id} is not a crawl or executor DAG" in page.text
    assert '<table class="tasks">' not in page.text and "secret" not in page.text.replace(dag_id, "")


def test_the_json_has_the_history_only_when_asked(client, running):
    log_in("alice")

    plain = client.get("/api/status").json()
    with_history = client.get("/api/status", params={"history": "true"}).json()

    assert "history" not in plain["tasks"][0]
    assert with_history["tasks"][0]["history"]["current_run"]["percent"] == 75.0


def test_the_plugin_frames_the_page_from_the_nav_and_from_a_dag_tab_with_relative_hrefs():
    from crawler_ops_plugin import CrawlerOpsPlugin

    views = {view["destination"]: view for view in CrawlerOpsPlugin.external_views}

    assert views["nav"]["href"] == "crawler-ops/" and views["nav"]["category"] == "browse"
    assert views["dag"]["href"] == "crawler-ops/?dag_id={DAG_ID}"
    assert all(view["url_route"] for view in views.values()), "a url_route makes the UI frame the page"


def test_the_status_view_imports_no_package_the_config_names(client, tmp_path, monkeypatch):
    """The api-server holds the JWT secret and the metadata DB's address: a status page view reads the config's names
    and imports nothing they name, not even the parent package of a transform or an executor function."""
    marker = tmp_path / "imported.txt"
    for package in ("side_effect_transforms", "side_effect_functions"):
        (tmp_path / "code" / package).mkdir(parents=True)
        (tmp_path / "code" / package / "__init__.py").write_text(
            f"import pathlib\npathlib.Path({str(marker)!r}).write_text({package!r})\n", encoding="utf-8"
        )
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    (tmp_path / "tasks.yaml").write_text(
        CONFIG
        + "  - {id: user_code, transform: side_effect_transforms.mod.fn, kafka: {topic: u}}\n"
        + "executors:\n  - {name: user_exec, function: side_effect_functions.mod.fn, source_table: s.t}\n",
        encoding="utf-8",
    )
    log_in("root")

    page = client.get("/")

    assert page.status_code == 200 and "user_code" in page.text
    assert not marker.exists(), f"the status view imported {marker.read_text() if marker.exists() else ''}"


class TeamViewers:
    """Airflow's SimpleAuthManager's rule in multi-team mode: a viewer reads the DAGs of their teams and every DAG
    asked about without a team (a question with no DAG included)."""

    def __init__(self, teams: dict[str, set[str]]) -> None:
        self.teams = teams

    def is_authorized_dag(self, *, method: str, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        team = details.team_name if details is not None else None
        return method == "GET" and not (team and team not in self.teams.get(user.name, set()))


@pytest.fixture
def team_viewers(multi_team: FakeAuthManager, monkeypatch: pytest.MonkeyPatch) -> TeamViewers:
    import airflow.api_fastapi.app as api_app

    viewers = TeamViewers({"carol": {"team_a"}})
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: viewers)
    return viewers


def test_in_multi_team_mode_an_entry_whose_dag_no_bundle_parsed_is_shown_to_no_team(client, team_viewers, tmp_path):
    (tmp_path / "tasks.yaml").write_text(
        CONFIG + "  - {id: unparsed, kafka: {topic: u}}\n  - {id: unparsed_broken, batch_size: 0, kafka: {topic: u}}\n",
        encoding="utf-8",
    )
    log_in("carol")

    report = client.get("/api/status").json()

    assert [row["task_id"] for row in report["tasks"]] == ["open_task"]
    assert [bad["task_id"] for bad in report["invalid_tasks"]] == ["broken_open"]


def test_in_multi_team_mode_a_config_that_does_not_load_is_quoted_to_no_team(client, team_viewers, tmp_path):
    (tmp_path / "tasks.yaml").write_text("tasks:\n  - {id: x, token: hunter2\n", encoding="utf-8")
    log_in("carol")

    response = client.get("/api/status")

    assert (response.status_code, response.json()["detail"]) == (500, web.GENERIC_CONFIG_ERROR)


class Unanswerable:
    def is_authorized_dag(self, **_: Any) -> bool:
        raise RuntimeError("auth backend down")


@pytest.mark.parametrize("failing", ["team lookup", "auth manager"])
def test_a_user_whose_permissions_cannot_be_determined_sees_nothing(client, multi_team, monkeypatch, failing):
    import airflow.api_fastapi.app as api_app
    from airflow.models.dag import DagModel

    def no_teams(dag_ids: Any, session: Any = None) -> dict[str, str]:
        raise RuntimeError("metadata DB down")

    if failing == "team lookup":
        monkeypatch.setattr(DagModel, "get_dag_id_to_team_name_mapping", staticmethod(no_teams))
    else:
        monkeypatch.setattr(api_app, "get_auth_manager", lambda: Unanswerable())
    log_in("carol")

    response = client.get("/api/status")

    assert response.status_code == 200
    assert (response.json()["tasks"], response.json()["invalid_tasks"]) == ([], [])


# --- the page's links and title, the DAG tab's target, and failing closed ------------------------------------------

ONE_TASK = {"generated_at": "2026-12-01T00:00:00+00:00", "tasks": [{"task_id": "t 1"}], "invalid_tasks": []}
TWO_TASKS = {**ONE_TASK, "tasks": [{"task_id": "t 1"}, {"task_id": "t2"}]}


def json_link(page: str) -> str:
    return re.search(r'JSON: <a href="([^"]*)">', page).group(1)  # type: ignore[union-attr]


def test_the_page_of_every_task_links_to_the_json_of_every_task_and_to_no_other_page():
    page = web.render_html(ONE_TASK)
    assert json_link(page) == "api/status" and "all tasks" not in page
    assert "<h2>crawler_ops status</h2>" in page and "2026-12-01T00:00:00+00:00" in page
    assert all(f"<th>{name}</th>" in page for name in web.COLUMNS)


def test_the_page_of_one_task_links_to_its_json_and_back_to_every_task():
    page = web.render_html(ONE_TASK, filtered=True)
    assert json_link(page) == "api/status?task=t%201" and '<a href="./">all tasks</a>' in page
    assert json_link(web.render_html(TWO_TASKS, filtered=True)) == "api/status"


def test_the_dag_tab_is_titled_by_its_dag_and_links_back_to_every_task():
    page = web.render_html(ONE_TASK, dag_id="crawl_t1")
    assert "<h2>crawler_ops status: crawl_t1</h2>" in page and '<a href="./">all tasks</a>' in page


@pytest.mark.parametrize(
    ("dag_id", "target"),
    [
        ("crawl_jobs", ("jobs", None)),
        ("exec_pool", (None, "pool")),
        ("crawl_", (None, None)),
        ("exec_", (None, None)),
        ("jobs_exec_", (None, None)),
        ("other", (None, None)),
    ],
)
def test_a_dag_id_stands_for_the_crawl_task_or_executor_its_prefix_names(dag_id, target):
    assert web.dag_target(dag_id) == target


def test_an_empty_report_has_the_shape_of_a_report_and_says_when_it_was_made():
    from datetime import UTC, datetime

    report = web.empty_report()
    assert (
        report.keys() == {"generated_at", "tasks", "invalid_tasks"} and report["tasks"] == report["invalid_tasks"] == []
    )
    assert datetime.fromisoformat(report["generated_at"]).tzinfo == UTC


class RaisingAuthManager(FakeAuthManager):
    def is_authorized_dag(self, **kwargs: Any) -> bool:
        raise RuntimeError("auth backend down")


def test_a_user_whose_right_to_every_dag_cannot_be_determined_gets_the_generic_config_error(monkeypatch, caplog):
    import airflow.api_fastapi.app as api_app

    monkeypatch.setattr(api_app, "get_auth_manager", lambda: RaisingAuthManager({}))
    user = SimpleNamespace(name="carol")
    with caplog.at_level("WARNING", logger="crawler_ops.ops.web"):
        assert web.may_read_every_dag(user) is False
    assert [r.getMessage() for r in caplog.records] == [
        f"status: the auth manager cannot tell whether {user} may read every DAG: auth backend down"
    ]


def test_the_login_is_resolved_from_the_bearer_token_as_the_rest_api_does(monkeypatch):
    import asyncio

    from airflow.api_fastapi.core_api import security

    async def bearer_scheme(request: Any) -> str:
        return f"credentials of {request}"

    async def get_user(request: Any, oauth_token: Any, bearer: Any) -> tuple[Any, Any, Any]:
        return request, oauth_token, bearer

    monkeypatch.setattr(security, "bearer_scheme", bearer_scheme)
    monkeypatch.setattr(security, "get_user", get_user)
    assert asyncio.run(web.current_user("request")) == ("request", None, "credentials of request")  # type: ignore[arg-type]


def test_the_dags_some_bundle_parsed_are_those_with_a_row_in_the_metadata_db(monkeypatch):
    from contextlib import contextmanager

    import airflow.utils.session
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    # The dag table of Airflow's metadata DB, its id column only: what the query reads.
    engine = create_engine("sqlite://")
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE dag (dag_id TEXT PRIMARY KEY)"))
        connection.execute(text("INSERT INTO dag VALUES ('crawl_a'), ('crawl_b'), ('exec_pool')"))

    @contextmanager
    def create_session() -> Iterator[Session]:
        with Session(engine) as session:
            yield session

    monkeypatch.setattr(airflow.utils.session, "create_session", create_session)
    assert web.parsed_dags(["crawl_a", "crawl_x", "exec_pool"]) == {"crawl_a", "exec_pool"}


FULL_REPORT = {
    "generated_at": "2026-12-01T00:00:00+00:00",
    "tasks": [{"task_id": "a"}, {"task_id": "b"}],
    "invalid_tasks": [{"task_id": "bad_a"}, {"task_id": "bad_b"}],
    "executors": [{"name": "x"}, {"name": "y"}],
    "invalid_executors": [{"name": "bad_x"}, {"name": "bad_y"}],
}


def test_a_report_built_for_everyone_is_cut_to_exactly_the_rows_the_user_may_see():
    visible = {
        "tasks": frozenset({"a"}),
        "errors": frozenset({"bad_b"}),
        "executors": frozenset({"y"}),
        "executor_errors": frozenset({"bad_x"}),
    }
    assert web.restrict(FULL_REPORT, visible, None, None) == {
        "generated_at": "2026-12-01T00:00:00+00:00",
        "tasks": [{"task_id": "a"}],
        "invalid_tasks": [{"task_id": "bad_b"}],
        "executors": [{"name": "y"}],
        "invalid_executors": [{"name": "bad_x"}],
    }
    assert FULL_REPORT["executors"] == [{"name": "x"}, {"name": "y"}], "the shared report is left as it was"


@pytest.mark.parametrize(
    ("visible", "task", "executor", "missing"),
    [
        ({}, "a", None, "a"),
        ({}, None, "x", "x"),
        ({"errors": {"bad_a"}}, "bad_a", None, None),
        ({"executor_errors": {"bad_x"}}, None, "bad_x", None),
    ],
    ids=["task", "executor", "task-with-a-config-error", "executor-with-a-config-error"],
)
def test_asking_for_an_entry_one_may_see_nothing_of_is_a_key_error_naming_it(visible, task, executor, missing):
    sets = {name: frozenset(visible.get(name, ())) for name in ("tasks", "errors", "executors", "executor_errors")}
    report = {**FULL_REPORT, "tasks": [], "executors": []}
    if missing is None:
        web.restrict(report, sets, task, executor)
        return
    with pytest.raises(KeyError) as caught:
        web.restrict(report, sets, task, executor)
    assert caught.value.args == (missing,)


EXECUTORS_CONFIG = """
tasks:
  - {id: open_task, kafka: {topic: open}}
  - {id: secret_task, kafka: {topic: secret}}
executors:
  - {name: open_exec, function: m.f, source_table: s.t, status_table: s.st1, output_fields: [id]}
  - {name: secret_exec, function: m.f, source_table: s.t, status_table: s.st2, output_fields: [id]}
  - {name: broken_open_exec, source_table: s.t}
  - {name: broken_secret_exec, source_table: s.t}
"""


def test_a_user_may_see_the_executors_and_executor_config_errors_of_the_dags_they_may_read(monkeypatch, tmp_path):
    import airflow.api_fastapi.app as api_app
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    from crawler_ops.config import load_config

    (tmp_path / "tasks.yaml").write_text(EXECUTORS_CONFIG, encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(tmp_path / "tasks.yaml"))
    readers = FakeAuthManager({"eve": {"crawl_open_task", "exec_open_exec", "exec_broken_open_exec"}})
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: readers)

    visible = web.visible_entries(SimpleNamespace(name="eve"), load_config(check_imports=False))

    assert visible == {
        "tasks": frozenset({"open_task"}),
        "errors": frozenset(),
        "executors": frozenset({"open_exec"}),
        "executor_errors": frozenset({"broken_open_exec"}),
    }
    asked = {call["details"].id: call["access_entity"] for call in readers.calls}
    assert asked == {
        "crawl_open_task": DagAccessEntity.RUN,
        "crawl_secret_task": DagAccessEntity.RUN,
        "exec_open_exec": DagAccessEntity.RUN,
        "exec_secret_exec": DagAccessEntity.RUN,
        "exec_broken_open_exec": None,
        "exec_broken_secret_exec": None,
    }, "a valid entry's runs, an invalid entry's DAG"


def test_teams_that_cannot_be_looked_up_are_logged_with_the_reason_and_nothing_is_readable(monkeypatch, caplog):
    import airflow.api_fastapi.app as api_app

    def no_teams(dag_ids: list[str]) -> dict[str, str | None]:
        raise RuntimeError("metadata DB down")

    monkeypatch.setattr(api_app, "get_auth_manager", lambda: FakeAuthManager({"root": {"*"}}))
    monkeypatch.setattr(web, "multi_team", lambda: True)
    monkeypatch.setattr(web, "dag_teams", no_teams)
    with caplog.at_level("WARNING", logger="crawler_ops.ops.web"):
        may_read = web.DagReader(SimpleNamespace(name="root"), ["crawl_a"])
    assert [r.getMessage() for r in caplog.records] == [
        "status: cannot look up the teams of the crawl DAGs, showing none: metadata DB down"
    ]
    assert may_read("crawl_a") is False


def test_a_question_the_auth_manager_cannot_answer_is_logged_with_the_user_the_dag_and_the_reason(monkeypatch, caplog):
    import airflow.api_fastapi.app as api_app

    monkeypatch.setattr(api_app, "get_auth_manager", lambda: RaisingAuthManager({}))
    monkeypatch.setattr(web, "multi_team", lambda: False)
    user = SimpleNamespace(name="carol")
    may_read = web.DagReader(user, ["crawl_a"])
    with caplog.at_level("WARNING", logger="crawler_ops.ops.web"):
        assert may_read("crawl_a") is False
    assert [r.getMessage() for r in caplog.records] == [
        f"status: the auth manager cannot tell whether {user} may read crawl_a: auth backend down"
    ]


class TakenSlots:
    """Build slots that are all taken: records how long each request offered to wait for one."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return False

    def release(self) -> None:
        raise AssertionError("no slot was given out")


def test_a_stored_request_waits_for_a_build_slot_only_for_what_is_left_of_its_deadline(monkeypatch):
    import time

    cache = report_cache.ReportCache()
    slots = TakenSlots()
    monkeypatch.setattr(cache, "builds", slots)

    for end in (time.monotonic() - 1.0, time.monotonic() + 0.3):
        with pytest.raises(report_cache.BusyError, match=r"^4 status reports are being gathered$"):
            cache.report("q", False, lambda: {"never": "built"}, end)

    passed, soon = slots.timeouts
    assert passed == 0.0, "a request past its deadline does not wait at all"
    assert soon is not None and 0.0 < soon <= 0.3
    assert cache.flights == {}


def test_the_field_drift_cell_shows_the_newest_drift_and_marks_a_change():
    drift = {
        "run_id": "manual__1",
        "status": "success",
        "summary": "drift: retyped salary string→integer (40 sampled records)",
        "sample_per_page": 20,
        "new": [],
        "missing": [],
        "retyped": [{"field": "salary", "from": ["string"], "to": "integer", "sampled_records": 40}],
    }
    quiet = {**drift, "summary": "drift: none (40 sampled records)", "retyped": []}
    report = {
        **ONE_TASK,
        "tasks": [{"task_id": "a", "drift": drift}, {"task_id": "b", "drift": quiet}, {"task_id": "c"}],
    }

    page = web.render_html(report)

    changed, unchanged, never = (row["drift"] for row in cells(page))
    assert changed.startswith('<span class="bad">drift: retyped salary string→integer (40 sampled records)</span>')
    assert "manual__1 (success); 20 records sampled a page" in changed
    assert unchanged.startswith("<span>drift: none (40 sampled records)</span>")
    assert never == "-"
