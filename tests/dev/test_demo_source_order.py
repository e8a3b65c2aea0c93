"""The demo source's record order (dev/demo_source/order.py): newest first serves the same records reversed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from demo_source.app import create_app
from tests.dev.test_demo_source import REF, SyncClient


@pytest.fixture
def client() -> Iterator[SyncClient]:
    sync_client = SyncClient(create_app(1000, REF))
    yield sync_client
    sync_client.close()


def records(client: SyncClient, task: str, offset: int, limit: int) -> list[dict[str, str]]:
    response = client.get(f"/api/{task}/list", params={"offset": offset, "limit": limit})
    assert response.status_code == 200, response.text
    return response.json()["data"]["data"]


def create(client: SyncClient, order: str) -> None:
    body = {"total": 50, "ref": REF.isoformat(), "seed": 7, "order": order}
    assert client.request("PUT", "/admin/tasks/t", json=body).json()["order"] == order


def test_newest_first_serves_the_same_records_in_reverse_and_appends_at_offset_0(client: SyncClient) -> None:
    create(client, "oldest_first")
    client.request("POST", "/admin/tasks/t/append", json={"n": 2})
    oldest_first = records(client, "t", 0, 52)
    create(client, "newest_first")
    newest_first = records(client, "t", 0, 50)
    assert newest_first == list(reversed(oldest_first[:50]))
    assert newest_first[0]["aae397"] > newest_first[-1]["aae397"]
    client.request("POST", "/admin/tasks/t/append", json={"n": 2})
    assert records(client, "t", 2, 50) == newest_first  # the older records moved up by the two appended
    assert records(client, "t", 0, 2) == list(reversed(oldest_first[50:]))
