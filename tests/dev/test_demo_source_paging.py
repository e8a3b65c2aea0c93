"""The demo source's paging modes (dev/demo_source/paging.py), in-process: a page-number endpoint with a page size
parameter or a fixed page size, a POST search, and a task without a count endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from demo_source.app import create_app
from tests.dev.test_demo_source import REF, SyncClient


@pytest.fixture
def client() -> Iterator[SyncClient]:
    sync_client = SyncClient(create_app(1000, REF))
    yield sync_client
    sync_client.close()


def create(client: SyncClient, total: int = 250, **paging: Any) -> None:
    body = {"total": total, "ref": REF.isoformat(), "paging": paging}
    assert client.request("PUT", "/admin/tasks/t", json=body).status_code == 200


def ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [r["id"] for r in response.json()["data"]["data"]]


def list_ids(client: SyncClient, offset: int, limit: int) -> list[str]:
    return ids(client.get("/api/t/list", params={"offset": offset, "limit": limit}))


def test_pages_are_numbered_from_first_page_and_sized_by_the_parameter(client: SyncClient) -> None:
    create(client, first_page=0)

    assert ids(client.get("/api/t/pages", params={"page": 2, "page_size": 100})) == list_ids(client, 200, 100)
    assert ids(client.get("/api/t/pages", params={"page": 3, "page_size": 100})) == []
    assert client.get("/api/t/pages", params={"page": -1}).status_code == 400
    logged = client.get("/admin/tasks/t/requests").json()["requests"][0]
    assert logged == {
        "offset": 200,
        "limit": 100,
        "status": 200,
        "method": "GET",
        "route": "pages",
        "page": 2,
        "page_size": 100,
    }


def test_a_fixed_page_size_ignores_the_size_asked_for(client: SyncClient) -> None:
    create(client, page_size=40)

    assert ids(client.get("/api/t/pages", params={"page": 2, "page_size": 1})) == list_ids(client, 40, 40)


def test_a_search_takes_offset_and_limit_or_a_page_in_its_json_body(client: SyncClient) -> None:
    create(client)

    assert ids(client.request("POST", "/api/t/search", json={"offset": 10, "limit": 5})) == list_ids(client, 10, 5)
    assert ids(client.request("POST", "/api/t/search", json={"page": 1, "page_size": 7})) == list_ids(client, 0, 7)
    assert client.request("POST", "/api/t/search", json={"offset": 10}).status_code == 400
    assert client.request("POST", "/api/t/search", json={"from": 10}).status_code == 400
    logged = client.get("/admin/tasks/t/requests").json()["requests"][0]
    assert logged["method"] == "POST" and logged["body"] == {"offset": 10, "limit": 5}


def test_a_task_without_a_count_endpoint_answers_404_there(client: SyncClient) -> None:
    create(client, count=False)

    assert client.get("/api/t/count").status_code == 404
    create(client)
    assert client.get("/api/t/count").json()["data"]["total"] == 250
