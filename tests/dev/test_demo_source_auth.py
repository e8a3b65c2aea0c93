"""The demo source's auth (``dev/demo_source/auth.py``), in-process through :class:`httpx.ASGITransport`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from demo_source.app import create_app
from tests.dev.test_demo_source import REF, SyncClient

LIST = "/api/t/list?offset=0&limit=5"


@pytest.fixture
def client() -> Iterator[SyncClient]:
    sync_client = SyncClient(create_app(1000, REF))
    yield sync_client
    sync_client.close()


def create(client: SyncClient, **auth: Any) -> None:
    client.request("PUT", "/admin/tasks/t", json={"total": 50, "auth": auth}).raise_for_status()


def token(client: SyncClient, **form: str) -> httpx.Response:
    return client.request("POST", "/oauth/t/token", data=form, auth=("app", "s3cret"))


@pytest.mark.parametrize(
    ("auth", "good", "bad"),
    [
        ({"type": "bearer", "token": "tok-1"}, {"headers": {"Authorization": "Bearer tok-1"}}, {}),
        ({"type": "api_key", "key": "k-1", "key_name": "X-Key"}, {"headers": {"X-Key": "k-1"}}, {"params": {}}),
        (
            {"type": "api_key", "key": "k-1", "key_name": "apikey", "key_in": "query"},
            {"params": {"apikey": "k-1"}},
            {"params": {"apikey": "k-2"}},
        ),
    ],
    ids=["bearer", "api-key-header", "api-key-query"],
)
def test_static_credentials_are_checked(client: SyncClient, auth: dict[str, Any], good: Any, bad: Any) -> None:
    create(client, **auth)
    assert client.get(LIST, **good).status_code == 200
    assert client.get(LIST, **bad).status_code == 401
    assert client.get("/api/other/count").status_code == 200, "a task without auth stays open"


def test_client_credentials_tokens_expire_and_are_counted(client: SyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("demo_source.auth.time.monotonic", lambda: now[0])
    create(client, type="oauth2", client_id="app", client_secret="s3cret", token_ttl_s=10)
    assert client.request("POST", "/oauth/t/token", data={"grant_type": "client_credentials"}).status_code == 401
    answer = token(client, grant_type="client_credentials").json()
    assert answer["expires_in"] == 10 and "refresh_token" not in answer
    bearer = {"Authorization": f"Bearer {answer['access_token']}"}
    assert client.get(LIST, headers=bearer).status_code == 200
    now[0] += 10
    assert client.get(LIST, headers=bearer).status_code == 401
    seen = client.get("/admin/tasks/t/auth").json()
    assert (seen["token_requests"], seen["refused"], seen["refused_grants"]) == (2, 1, 1)


def test_a_rotated_refresh_token_keeps_its_parent_valid_until_it_is_used(client: SyncClient) -> None:
    create(client, type="oauth2", client_id="app", client_secret="s3cret", refresh_token="rt-0", rotate=True)
    first = token(client, grant_type="refresh_token", refresh_token="rt-0").json()["refresh_token"]
    # As after a worker killed before it saved `first`: the parent still works, and issues another successor.
    second = token(client, grant_type="refresh_token", refresh_token="rt-0").json()["refresh_token"]
    answer = token(client, grant_type="refresh_token", refresh_token=second)
    assert answer.status_code == 200
    for retired in ("rt-0", first):
        refused = token(client, grant_type="refresh_token", refresh_token=retired)
        assert (refused.status_code, refused.json()) == (400, {"error": "invalid_grant"})
    assert token(client, grant_type="refresh_token", refresh_token=answer.json()["refresh_token"]).status_code == 200


def test_revoke_ends_every_access_token(client: SyncClient) -> None:
    create(client, type="oauth2", token_ttl_s=60)
    access = client.request("POST", "/oauth/t/token", data={"grant_type": "client_credentials"}).json()["access_token"]
    assert client.request("POST", "/admin/tasks/t/auth/revoke").json() == {"revoked": 1}
    assert client.get(LIST, headers={"Authorization": f"Bearer {access}"}).status_code == 401
