"""The status view's bounds on threads and connections: parts abandoned at the report's deadline end with their
PostgreSQL connections (a database that accepts connections and never answers, on loopback), and parallel
``live=false`` requests share one build of the report, each filtered for its user."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from crawler_ops.config import parse_config
from crawler_ops.ops import report_cache, status, web
from tests.unit.ops.test_web import CONFIG, FakeAuthManager
from tests.waiting import wait_until


class SilentPostgres:
    """Accepts connections on loopback and never answers: a PostgreSQL stuck before its first reply. Counts the
    connections still open."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.clients: list[socket.socket] = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.clients.append(client)

    def open_connections(self) -> int:
        """Connections the client has not closed (a closed one reads as end of file)."""
        return sum(not self.ended(client) for client in self.clients)

    @staticmethod
    def ended(client: socket.socket) -> bool:
        client.setblocking(False)
        try:
            while client.recv(65536):  # what the client sent (its startup packet), then end of file
                pass
        except BlockingIOError:
            return False
        except OSError:
            pass
        return True

    def close(self) -> None:
        self.server.close()
        for client in self.clients:
            client.close()


def status_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("status")]


def test_parts_abandoned_at_the_deadline_end_with_their_connections(monkeypatch, airflow_connection):
    silent = SilentPostgres()
    airflow_connection("silent_pg", conn_type="postgres", host="127.0.0.1", port=silent.port, login="u", schema="d")
    monkeypatch.setattr(status, "active_runs", lambda dag_ids: ({}, None))
    loaded = parse_config({"tasks": [{"id": "jobs", "postgres_conn_id": "silent_pg", "kafka": {"topic": "jobs"}}]})
    before = set(status_threads())

    report = status.collect(loaded, live=False, history=True, end=time.monotonic() + 0.5)

    assert set(status_threads()) - before, "the report came back while its database part was still connecting"
    (row,) = report["tasks"]
    assert row["db_error"] == "no answer within the status deadline of 5s"
    wait_until(
        lambda: not set(status_threads()) - before,
        status.STATUS_CONNECT_TIMEOUT_S + 30,
        "the part abandoned at the deadline to end (its connect timeout)",
    )
    # psycopg leaves a timed-out attempt's socket in a reference cycle; the view collects it when the part ends, and
    # whatever else the test session keeps (log records with tracebacks) holds nothing past this collection.
    gc.collect()
    assert silent.clients and silent.open_connections() == 0, "an abandoned part left its connection open"
    silent.close()


def user_from_header(request: Request) -> Any:
    return SimpleNamespace(name=request.headers["X-User"])


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[TestClient]:
    import airflow.api_fastapi.app as api_app

    config = tmp_path / "tasks.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    readers = FakeAuthManager({"alice": {"crawl_open_task", "crawl_broken_open"}, "root": {"*"}})
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: readers)
    monkeypatch.setattr(status, "active_runs", lambda dag_ids: ({}, None))
    monkeypatch.setattr(web, "REPORTS", report_cache.ReportCache())
    yield TestClient(web.app)
    web.app.dependency_overrides.clear()


def test_parallel_non_live_requests_share_one_build_each_filtered_for_its_user(client, monkeypatch):
    builds: list[str] = []
    most_threads = [0]
    asked = [0]

    def stored_status(cfg: Any) -> dict[str, Any]:
        builds.append(cfg.id)
        most_threads[0] = max(most_threads[0], len(status_threads()))
        wait_until(lambda: asked[0] == 42, 60, "all 42 requests sent while the report is being built")
        return {"watermark": 40, "status": "incomplete"}

    monkeypatch.setattr(status, "stored_status", stored_status)
    users = iter(["root" if i % 2 else "alice" for i in range(42)])
    lock = threading.Lock()

    def ask(_: int) -> tuple[str, Any]:
        with lock:
            name = next(users)
            asked[0] += 1
        response = client.get("/api/status", params={"live": "false"}, headers={"X-User": name})
        return name, response

    web.app.dependency_overrides[web.current_user] = user_from_header
    with ThreadPoolExecutor(42) as pool:
        answers = list(pool.map(ask, range(42)))

    assert all(r.status_code == 200 for _, r in answers), {r.status_code for _, r in answers}
    assert sorted(builds) == ["open_task", "secret_task"], "one build for 42 requests"
    assert most_threads[0] <= 4, f"{most_threads[0]} report threads"
    for name, response in answers:
        shown = [row["task_id"] for row in response.json()["tasks"]]
        invalid = [bad["task_id"] for bad in response.json()["invalid_tasks"]]
        if name == "alice":
            assert (shown, invalid) == (["open_task"], ["broken_open"]), "the shared build, filtered for alice"
        else:
            assert (shown, invalid) == (["open_task", "secret_task"], ["broken_open", "broken_secret"])


def test_a_non_live_question_about_a_task_one_may_not_read_is_404_even_when_built_for_another(client):
    web.app.dependency_overrides[web.current_user] = user_from_header
    params = {"live": "false", "task": "secret_task"}

    assert client.get("/api/status", params=params, headers={"X-User": "root"}).status_code == 200
    response = client.get("/api/status", params=params, headers={"X-User": "alice"})

    assert response.status_code == 404 and "secret" not in str(response.json()).replace("'secret_task'", "")


def test_non_live_builds_beyond_the_cap_wait_for_a_slot_until_the_deadline_then_are_busy():
    cache = report_cache.ReportCache(max_builds=1)
    release = threading.Event()
    building = threading.Event()

    def slow() -> dict[str, Any]:
        building.set()
        release.wait(60)
        return {"tasks": []}

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.report, "a", False, slow, time.monotonic() + 60)
        wait_until(building.is_set, 30, "the first build to take the only slot")
        with pytest.raises(report_cache.BusyError, match="1 status reports are being gathered"):
            cache.report("b", False, lambda: {"tasks": ["never built"]}, time.monotonic() + 0.3)
        assert not release.is_set() and not first.done(), "busy by its own deadline, while the slot was still held"

        waiting = pool.submit(cache.report, "c", False, lambda: {"tasks": ["c"]}, time.monotonic() + 60)
        wait_until(lambda: "c" in cache.flights, 30, "the request for c to wait for a build slot")
        assert not waiting.done(), "no slot, no answer yet"
        release.set()
        assert first.result(timeout=30) == {"tasks": []}
        assert waiting.result(timeout=30) == {"tasks": ["c"]}, "built once the slot was free, within its deadline"
    assert cache.report("b", False, lambda: {"tasks": ["b"]}, time.monotonic() + 1) == {"tasks": ["b"]}
