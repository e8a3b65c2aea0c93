"""Unit tests of crawler_ops.hooks.source.auth and the token logic of crawler_ops.hooks.source.tokens: what each
``source.auth`` type sends, secrets kept out of errors and log lines, and the shared OAuth2 token (one request per
expiry, a 401's one renewal and retry, rotated refresh tokens) over an in-memory token row instead of PostgreSQL's."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError, StatusTableError
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.source.tokens import Issued, SharedToken, TokenRow
from tests.unit.hooks.mock_http import route_clients

COUNT = httpx.Response(200, json={"code": 0, "data": {"total": 7}})


@dataclass
class Provider:
    """The source and its token endpoint (``/token``): tokens ``at-1``, ``at-2``... valid until revoked; with
    ``rotate``, each refresh token grant answers a new refresh token."""

    ttl: float = 600
    rotate: bool = False
    revoked: set[str] = field(default_factory=set)
    issued: list[str] = field(default_factory=list)
    grants: list[dict[str, str]] = field(default_factory=list)
    requests: list[tuple[str | None, dict[str, str]]] = field(default_factory=list)
    refuse_all: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            form = dict(parse_qsl(request.content.decode()))
            self.grants.append({**form, "authorization": request.headers.get("authorization", "")})
            token = f"at-{len(self.issued) + 1}"
            self.issued.append(token)
            answer: dict[str, Any] = {"access_token": token, "token_type": "Bearer", "expires_in": self.ttl}
            if self.rotate and form.get("grant_type") == "refresh_token":
                answer["refresh_token"] = f"rt-{len(self.issued)}"
            return httpx.Response(200, json=answer)
        self.headers = dict(request.headers)
        # As it arrived: an auth flow's retry changes the same request object.
        self.requests.append((request.headers.get("authorization"), dict(request.url.params)))
        sent = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.refuse_all or sent in self.revoked or (sent.startswith("at-") and sent not in self.issued):
            return httpx.Response(401, json={"msg": f"refused {request.url} {sent}"})
        return COUNT


@dataclass
class MemoryRow:
    """The token row of ``crawler_ops.source_token`` in memory, with PostgreSQL's semantics for one process."""

    token: str | None = None
    left_s: float = 0.0
    refresh_token: str | None = None
    seed: str | None = None
    locks: int = 0

    def read(self) -> tuple[str | None, float]:
        return self.token, self.left_s

    @contextmanager
    def locked(self) -> Iterator[tuple[TokenRow, Any]]:
        self.locks += 1
        yield TokenRow(self.token, self.left_s, self.refresh_token, self.seed), None

    def save(self, _cur: Any, issued: Issued, refresh_token: str, seed: str | None) -> None:
        self.token, self.left_s, self.refresh_token, self.seed = (
            issued.access_token,
            issued.lifetime_s,
            refresh_token,
            seed,
        )

    def close(self) -> None:
        pass


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Provider:
    served = Provider()
    route_clients(monkeypatch, served)
    return served


@pytest.fixture
def connection(airflow_connection: Callable[..., None]) -> Callable[..., None]:
    def define(**fields: Any) -> None:
        airflow_connection("src", conn_type="http", host="source.test", schema="http", **fields)

    return define


def hook(auth: dict[str, Any], token: SharedToken | None = None, **source: Any) -> SourceApiHook:
    return SourceApiHook(
        SourceConfig(**{"conn_id": "src", "auth": auth, "max_retries": 0, **source}), "jobs", "j", token=token
    )


@pytest.mark.parametrize(
    ("auth", "conn", "expected"),
    [
        ({}, {"login": "u", "password": "p-1"}, ("Basic " + base64.b64encode(b"u:p-1").decode(), {})),
        ({}, {"password": "p-1"}, (None, {})),
        ({"type": "none"}, {"login": "u", "password": "p-1"}, (None, {})),
        ({"type": "bearer"}, {"password": "tok-1"}, ("Bearer tok-1", {})),
        ({"type": "bearer"}, {"extra": {"token": "tok-2"}}, ("Bearer tok-2", {})),
        ({"type": "api_key", "name": "key", "in": "query"}, {"password": "k-1"}, (None, {"key": "k-1"})),
    ],
    ids=["basic", "no-login-no-auth", "none", "bearer", "bearer-extra", "api-key-query"],
)
def test_each_static_type_sends_the_connection_secret(provider, connection, auth, conn, expected):
    connection(**conn)

    assert hook(auth).get_total() == 7

    (request,) = provider.requests
    assert request == expected
    assert "token" not in provider.headers, "the extra's token is a secret, not a header"


def test_an_api_key_header_keeps_the_extra_headers(provider, connection):
    connection(password="k-1", extra={"Accept-Language": "zh-CN"})

    hook({"type": "api_key", "name": "X-Api-Key"}).get_total()

    (request,) = provider.requests
    assert (
        request[0] is None and provider.headers["x-api-key"] == "k-1" and provider.headers["accept-language"] == "zh-CN"
    )


@pytest.mark.parametrize(
    "auth",
    [{"type": "bearer"}, {"type": "api_key", "name": "k"}, {"type": "oauth2_client_credentials", "token_url": "/t"}],
)
def test_a_missing_secret_fails_naming_the_task_and_the_connection(provider, connection, auth):
    connection(login="someone")

    with pytest.raises(SourceError, match=r"task jobs: auth \w+ of source connection 'src' needs") as failure:
        hook(auth, SharedToken(MemoryRow())).get_total()
    assert not failure.value.retriable and provider.requests == []


def test_secrets_are_masked_in_errors_and_httpx_log_lines(provider, connection, caplog):
    caplog.set_level(logging.INFO, logger="httpx")  # Airflow quiets it; a deployment may not
    connection(password="k-secret-1")
    provider.refuse_all = True

    with pytest.raises(SourceError, match="HTTP 401") as failure:
        hook({"type": "api_key", "name": "apikey", "in": "query"}).get_total()

    assert "k-secret-1" not in str(failure.value) and "***" in str(failure.value), "the source echoed the key"
    assert "apikey=***" in caplog.text and "k-secret-1" not in caplog.text


def test_a_key_that_a_url_percent_encodes_is_masked_in_httpx_log_lines_too(provider, connection, caplog):
    caplog.set_level(logging.INFO, logger="httpx")
    connection(password="k+ey/canary=1 2")
    provider.refuse_all = True

    with pytest.raises(SourceError, match="HTTP 401"):
        hook({"type": "api_key", "name": "apikey", "in": "query"}).get_total()

    assert "apikey=***" in caplog.text and "canary" not in caplog.text, caplog.text


# --------------------------------------------------------------------------- OAuth2


def oauth2(**auth: Any) -> dict[str, Any]:
    return {"type": "oauth2_client_credentials", "token_url": "/token", **auth}


def test_one_token_serves_many_requests_and_goes_with_client_credentials(provider, connection):
    connection(login="app", password="cs-1")
    token = SharedToken(MemoryRow())
    source = hook(oauth2(scope="jobs.read"), token)

    for _ in range(3):
        source.get_total()

    assert [r[0] for r in provider.requests] == ["Bearer at-1"] * 3
    (grant,) = provider.grants
    assert grant["authorization"] == "Basic " + base64.b64encode(b"app:cs-1").decode()
    assert (grant["grant_type"], grant["scope"]) == ("client_credentials", "jobs.read")


def test_a_401_leads_to_one_renewal_and_one_retry(provider, connection):
    connection(login="app", password="cs-1")
    token = SharedToken(MemoryRow())
    source = hook(oauth2(), token)
    source.get_total()
    provider.revoked.add("at-1")

    assert source.get_total() == 7

    assert [r[0] for r in provider.requests] == ["Bearer at-1", "Bearer at-1", "Bearer at-2"]
    provider.refuse_all = True
    with pytest.raises(SourceError, match="HTTP 401") as failure:
        source.get_total()
    assert not failure.value.retriable
    assert len(provider.requests) == 5 and len(provider.issued) == 3, "one renewal, one retry, then the 401 stands"


def test_a_worker_that_waited_for_the_row_uses_the_token_another_one_saved(provider, connection):
    connection(login="app", password="cs-1")
    row = MemoryRow()
    first, second = SharedToken(row), SharedToken(row)  # two processes on one token row
    hook(oauth2(), first).get_total()
    provider.revoked.add("at-1")
    hook(oauth2(), first).get_total()  # the first process met the 401 and renewed: at-2 is in the row

    # The second still holds at-1 in memory: its 401 finds at-2 in the row, and asks the provider for nothing.
    second.keep("at-1", 600)
    assert hook(oauth2(), second).get_total() == 7

    assert provider.issued == ["at-1", "at-2"]
    assert [r[0] for r in provider.requests][-2:] == ["Bearer at-1", "Bearer at-2"]


def test_an_expired_token_is_renewed_once_and_the_rotated_refresh_token_kept(provider, connection):
    connection(password="rt-first", login="app", extra={"client_secret": "cs-2"})
    provider.rotate = True
    row = MemoryRow()
    auth = {"type": "oauth2_refresh_token", "token_url": "http://auth.test/token", "client_auth": "body"}
    hook(auth, SharedToken(row)).get_total()
    assert (row.refresh_token, provider.grants[0]["refresh_token"]) == ("rt-1", "rt-first")
    assert (provider.grants[0]["client_id"], provider.grants[0]["client_secret"]) == ("app", "cs-2")

    row.left_s = -1  # expired, for every process
    hook(auth, SharedToken(row)).get_total()
    hook(auth, SharedToken(row)).get_total()

    assert [g["refresh_token"] for g in provider.grants] == ["rt-first", "rt-1"]
    assert row.refresh_token == "rt-2"
    # A new refresh token in the connection starts over from it, not from the one the row kept.
    connection(password="rt-new", login="app", extra={"client_secret": "cs-2"})
    row.left_s = -1
    hook(auth, SharedToken(row)).get_total()
    assert provider.grants[-1]["refresh_token"] == "rt-new"


def test_a_token_is_used_a_tenth_of_its_lifetime_less_at_most_thirty_seconds():
    assert Issued("t", 10).lifetime_s == 9
    assert Issued("t", 3600).lifetime_s == 3570


def test_a_refused_grant_names_the_providers_error_code_only(connection, monkeypatch):
    connection(login="app", password="cs-wrong")
    refused = httpx.Response(401, json={"error": "invalid_client", "error_description": "bad secret cs-wrong"})
    route_clients(monkeypatch, lambda r: refused)

    with pytest.raises(SourceError) as failure:
        hook(oauth2(), SharedToken(MemoryRow())).get_total()

    assert "answered HTTP 401 (invalid_client)" in str(failure.value) and "cs-wrong" not in str(failure.value)
    assert "task jobs" in str(failure.value) and not failure.value.retriable


def test_postgresql_failing_under_the_token_fails_the_request_retriable_naming_the_task(provider, connection):
    connection(login="app", password="cs-1")
    row = MemoryRow()

    def down() -> tuple[str | None, float]:
        raise StatusTableError("the OAuth2 token of source 'src': PostgreSQL failed: gone")

    row.read = down  # type: ignore[method-assign]

    with pytest.raises(SourceError, match="task jobs: the OAuth2 token of source 'src': PostgreSQL failed") as failure:
        hook(oauth2(), SharedToken(row)).get_total()
    assert failure.value.retriable and provider.requests == []


# --------------------------------------------------------------------------- secrets that cannot be sent


@pytest.mark.parametrize("bad", ["tok-canary\n", "tok-canary\r\nX-Injected: 1", "tok-\x7fcanary"])
def test_a_static_header_secret_that_cannot_be_sent_fails_clearly_without_quoting_it(provider, connection, bad):
    connection(password=bad)

    with pytest.raises(SourceError, match="its secret cannot be sent in a header") as failure:
        hook({"type": "bearer"}).get_total()

    assert "canary" not in str(failure.value) and not failure.value.retriable
    assert "source connection 'src'" in str(failure.value) and "task jobs" in str(failure.value)
    assert provider.requests == [], "nothing was sent"


@pytest.mark.parametrize("bad", ["at-canary\n", "at-canary\r\nX-Injected: 1", "at-" + "c" * 9000, "at-金丝雀"])
def test_an_issued_token_that_cannot_be_sent_is_refused_and_not_stored(connection, monkeypatch, bad):
    connection(login="app", password="cs-1")
    issued = httpx.Response(200, json={"access_token": bad, "expires_in": 600})
    route_clients(monkeypatch, lambda request: issued)
    row = MemoryRow()

    with pytest.raises(SourceError, match="cannot be sent in a header") as failure:
        hook(oauth2(), SharedToken(row)).get_total()

    assert "canary" not in str(failure.value) and "金丝雀" not in str(failure.value)
    assert failure.value.retriable, "a provider's glitch: asked again later"
    assert row.token is None, "the shared row keeps no token that fails every worker"


def test_a_failing_token_request_waits_between_tries_with_the_row_released(connection, monkeypatch):
    connection(login="app", password="cs-1")
    answers = iter([httpx.Response(503), httpx.Response(503), None])

    def provider(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/token":
            return COUNT
        return next(answers) or httpx.Response(200, json={"access_token": "at-1", "expires_in": 600})

    route_clients(monkeypatch, provider)
    row = MemoryRow()
    held = []
    locked = row.locked

    @contextmanager
    def tracked() -> Iterator[tuple[TokenRow, Any]]:
        held.append(True)
        try:
            with locked() as found:
                yield found
        finally:
            held.pop()

    row.locked = tracked  # type: ignore[method-assign]
    slept: list[tuple[float, bool]] = []
    monkeypatch.setattr("time.sleep", lambda s: slept.append((s, bool(held))))

    assert hook(oauth2(), SharedToken(row), max_retries=2, backoff_s=0.01).get_total() == 7

    assert [while_held for _, while_held in slept] == [False, False], "no wait with the token row locked"
    assert row.locks == 3 and row.token == "at-1", "each try takes the row again, and reads it again"


@pytest.mark.parametrize(
    ("expires_in", "lifetime"),
    [("1e300", 365 * 86_400), ('"' + "9" * 400 + '"', 365 * 86_400), ("1e999", 365 * 86_400), ("-5", 3600)],
    ids=["1e300", "400-digits", "inf", "negative"],
)
def test_a_hostile_expires_in_is_clamped_to_a_year_or_the_default(connection, monkeypatch, expires_in, lifetime):
    connection(login="app", password="cs-1")
    issued = httpx.Response(200, content=b'{"access_token": "at-1", "expires_in": %s}' % expires_in.encode())
    route_clients(monkeypatch, lambda request: issued if request.url.path == "/token" else COUNT)
    row = MemoryRow()

    assert hook(oauth2(), SharedToken(row)).get_total() == 7

    assert row.token == "at-1" and row.left_s == Issued("at-1", lifetime).lifetime_s
