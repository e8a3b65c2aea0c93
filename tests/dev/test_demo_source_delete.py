"""The demo source forgets a task on ``DELETE /admin/tasks/{task}``: the test suite removes its data sets with it."""

from __future__ import annotations

from datetime import UTC, datetime

from demo_source.app import create_app
from tests.dev.test_demo_source import SyncClient


def test_a_deleted_task_is_gone_from_the_list_and_comes_back_with_the_defaults():
    client = SyncClient(create_app(1000, datetime(2026, 11, 20, tzinfo=UTC)))
    try:
        assert client.request("PUT", "/admin/tasks/gone", json={"total": 7}).status_code == 200
        assert client.request("PUT", "/admin/tasks/kept", json={"total": 9}).status_code == 200

        deleted = client.request("DELETE", "/admin/tasks/gone")
        again = client.request("DELETE", "/admin/tasks/gone")

        assert deleted.json() == {"deleted": True} and again.json() == {"deleted": False}
        assert client.get("/admin/tasks").json() == {"tasks": ["kept"]}
        assert client.get("/api/gone/count").json()["data"]["total"] == 1000, "a new task with the defaults"
    finally:
        client.close()
