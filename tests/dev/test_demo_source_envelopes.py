"""The demo source's body-level answers (dev/demo_source/envelopes.py), in-process: error codes in HTTP 200 bodies
every Nth page request or for pages holding given offsets, an expired token reported in the body, and pages too
large unless asked smaller."""

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


def create(client: SyncClient, envelopes: dict[str, Any], **config: Any) -> None:
    body = {"total": 250, "ref": REF.isoformat(), "envelopes": envelopes, **config}
    assert client.request("PUT", "/admin/tasks/t", json=body).status_code == 200


def page(client: SyncClient, offset: int, limit: int, **headers: str) -> Any:
    response = client.get("/api/t/list", params={"offset": offset, "limit": limit}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_every_nth_page_request_answers_a_code_in_the_body(client: SyncClient) -> None:
    create(client, {"rate_limited_every": 3, "retry_after_s": 2, "busy_every": 2})

    codes = [page(client, 0, 10)["code"] for _ in range(6)]

    assert codes == [0, 50301, 42901, 50301, 0, 42901]
    assert page(client, 0, 10)["code"] == 0
    assert client.get("/admin/tasks/t").json()["envelopes"] == {"42901": 2, "50301": 2}


def test_pages_holding_given_offsets_fail_or_are_withheld(client: SyncClient) -> None:
    create(client, {"fail_offsets": [15], "skip_offsets": [30]})

    assert page(client, 10, 10) == {"code": 40001, "msg": "permanent error"}
    assert page(client, 30, 1) == {"code": 20401, "msg": "page withheld"}
    assert len(page(client, 0, 10)["data"]["data"]) == 10


def test_a_page_is_too_large_unless_asked_smaller(client: SyncClient) -> None:
    create(client, {"large_over": 25, "large_kb": 64})

    response = client.get("/api/t/list", params={"offset": 0, "limit": 50})

    assert len(response.content) > 64 * 1024 and "data" not in response.json()
    assert len(page(client, 0, 25)["data"]["data"]) == 25


def test_an_expired_token_is_reported_in_the_body_and_every_nth_request_revokes_the_tokens(client: SyncClient) -> None:
    auth = {"type": "oauth2", "client_id": "c", "client_secret": "s"}
    create(client, {"expire_every": 2, "expired_in_body": True}, auth=auth)
    form = {"grant_type": "client_credentials", "client_id": "c", "client_secret": "s"}
    token = client.request("POST", "/oauth/t/token", data=form).json()["access_token"]
    bearer = {"Authorization": f"Bearer {token}"}

    assert page(client, 0, 10, **bearer)["code"] == 0
    assert page(client, 0, 10, **bearer) == {"code": 40101, "msg": "token expired"}, "revoked now"
    assert page(client, 0, 10, **bearer) == {"code": 40101, "msg": "token expired"}, "reported in the body"
    assert client.get("/admin/tasks/t").json()["envelopes"] == {"40101": 2, "revoked": 1}
