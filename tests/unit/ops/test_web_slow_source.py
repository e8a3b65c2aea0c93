"""The status app against a source that trickles its answers (one byte every half second), on loopback: a report
comes back within the status deadline with the source as an error, and parallel requests neither gather more
than a few live reports at once nor wait for a turn."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crawler_ops.ops import report_cache, web
from tests.hostile_source import HostileSource

COUNT = b'{"code": 0, "data": {"total": 5}}' + b" " * 30
DRIP_S = 0.5


class ReadsEverything:
    def is_authorized_dag(self, *, method: str, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        return True


@pytest.fixture
def client(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, airflow_connection: Callable[..., None]
) -> Iterator[tuple[TestClient, HostileSource]]:
    import airflow.api_fastapi.app as api_app

    source = HostileSource()
    source.replies["count"] = (200, {"Content-Type": "application/json"}, COUNT)
    source.drips["count"] = DRIP_S
    airflow_connection("slow", **source.connection())
    config = tmp_path / "tasks.yaml"
    config.write_text("tasks:\n  - {id: slow_task, source: {conn_id: slow}, kafka: {topic: slow}}\n", encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    monkeypatch.setattr(api_app, "get_auth_manager", lambda: ReadsEverything())
    monkeypatch.setattr(web, "REPORTS", report_cache.ReportCache())
    web.app.dependency_overrides[web.current_user] = lambda: SimpleNamespace(name="alice")
    yield TestClient(web.app), source
    web.app.dependency_overrides.clear()
    source.close()


def test_a_report_on_a_trickling_source_comes_back_by_the_deadline_showing_the_source_as_an_error(client):
    app, source = client
    response = app.get("/api/status")

    assert response.status_code == 200
    (row,) = response.json()["tasks"]
    assert row["source_total"] is None
    assert "task slow_task: GET /api/slow_task/count count did not finish within its deadline" in row["source_error"]
    assert source.served == ["count"] and source.finished == [], "answered before the source's 31 s body was sent"


def test_parallel_reports_gather_at_most_the_cap_at_once_answer_the_rest_at_once_and_reuse_the_answer(client):
    app, source = client
    gathering: list[int] = []
    done = threading.Event()
    answered: list[int] = []  # status codes, in the order the answers came back
    lock = threading.Lock()

    def count_report_threads() -> None:
        while not done.wait(0.05):
            gathering.append(sum(1 for t in threading.enumerate() if t.name.startswith("status_")))

    def get(_: int) -> Any:
        response = app.get("/api/status")
        with lock:
            answered.append(response.status_code)
        return response

    counter = threading.Thread(target=count_report_threads)
    counter.start()
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(get, range(12)))
    done.set()
    counter.join()

    # One task: a report runs its stored progress, source total, Kafka lag and Airflow runs, a thread each at most.
    assert 0 < max(gathering) <= report_cache.MAX_LIVE_REPORTS * 4, f"{max(gathering)} report threads for 12 requests"
    gathered = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code != 200]
    assert len(source.served) == len(gathered) <= report_cache.MAX_LIVE_REPORTS, "the source was asked per slot"
    assert gathered and source.finished == [], "the gathered reports came back before the source's bodies ended"
    assert all(r.status_code == 503 and r.json()["detail"].startswith("busy: ") for r in refused)
    assert all(r.headers["retry-after"] == "5" for r in refused)
    assert answered == [503] * len(refused) + [200] * len(gathered), "refused at once, not queued behind a slot"

    again = app.get("/api/status")

    assert again.status_code == 200
    assert again.json()["generated_at"] in {r.json()["generated_at"] for r in gathered}, "the cached answer"
    assert len(source.served) == len(gathered), "not asked again within the TTL"
