"""Auth of the demo source's data API, per task (``auth`` in ``PUT /admin/tasks/{task}``).

* ``basic``: every ``/api/{task}/...`` request wants ``Authorization: Basic base64(<login>:<password>)`` (RFC 7617).
* ``bearer``: every ``/api/{task}/...`` request wants ``Authorization: Bearer <token>``.
* ``api_key``: it wants the key in the header or query parameter ``key_name``.
* ``oauth2``: it wants ``Authorization: Bearer <access token>`` issued by ``POST /oauth/{task}/token`` (form body:
  ``grant_type=client_credentials``, or ``grant_type=refresh_token&refresh_token=...``; the client's id and secret
  by HTTP basic auth or as form fields ``client_id`` / ``client_secret``). Access tokens expire ``token_ttl_s``
  after they were issued. With ``rotate``, each refresh issues a new refresh token; the one used stays valid until
  its successor is first used (a reuse interval, as Okta and Auth0 offer), then it and its other successors stop
  working. ``token_latency_ms`` delays each token answer (a slow identity provider).

Anything else answers 401 (an expired, revoked or unknown token), and the token endpoint 400 ``invalid_grant`` or 401
``invalid_client`` as RFC 6749 says. ``GET /admin/tasks/{task}/auth`` reports the token requests (the tests read
it); ``POST /admin/tasks/{task}/auth/revoke`` revokes every access token issued so far.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl

import msgspec


class AuthOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The ``auth`` member of ``PUT /admin/tasks/{task}``."""

    type: Literal["basic", "bearer", "api_key", "oauth2"]
    login: str | None = None
    password: str | None = None
    token: str | None = None
    key: str | None = None
    key_name: str = "X-Api-Key"
    key_in: Literal["header", "query"] = "header"
    client_id: str | None = None
    client_secret: str | None = None
    refresh_token: str | None = None
    rotate: bool = False
    token_ttl_s: float = 3600.0
    token_latency_ms: int = 0


@dataclass
class Refresh:
    """A refresh token: the one it was issued for (``parent``) and the ones issued for it."""

    parent: str | None
    children: list[str] = field(default_factory=list)


@dataclass
class AuthState:
    """One task's auth: its options, the access tokens issued (token -> expiry, monotonic), the refresh tokens that
    still work, and what the tests read."""

    options: AuthOptions
    access: dict[str, float] = field(default_factory=dict)
    refresh: dict[str, Refresh] = field(default_factory=dict)
    token_requests: int = 0
    grants: dict[str, int] = field(default_factory=dict)
    issued_at: list[float] = field(default_factory=list)
    refused: int = 0
    refused_grants: int = 0

    def __post_init__(self) -> None:
        if self.options.refresh_token:
            self.refresh[self.options.refresh_token] = Refresh(None)

    def allows(self, headers: dict[bytes, bytes], query: dict[str, str]) -> bool:
        """Whether a data request carries what the task's auth wants (counting the refusals)."""
        options = self.options
        sent = headers.get(b"authorization", b"").decode("latin-1")
        if options.type == "basic":
            pair = f"{options.login}:{options.password}".encode()
            ok = same(sent, "Basic " + base64.b64encode(pair).decode())
        elif options.type == "bearer":
            ok = same(sent, f"Bearer {options.token}")
        elif options.type == "api_key":
            name = options.key_name
            given = query.get(name) if options.key_in == "query" else headers.get(name.lower().encode(), b"").decode()
            ok = same(given or "", options.key or "")
        else:
            token = sent.removeprefix("Bearer ") if sent.startswith("Bearer ") else ""
            ok = time.monotonic() < self.access.get(token, 0.0)
        if not ok:
            self.refused += 1
        return ok

    def grant(self, headers: dict[bytes, bytes], body: bytes) -> tuple[int, dict[str, object]]:
        """Answer a token request: (status, JSON body)."""
        self.token_requests += 1
        form = dict(parse_qsl(body.decode("latin-1")))
        kind = form.get("grant_type", "")
        self.grants[kind] = self.grants.get(kind, 0) + 1
        if not self.client_ok(headers, form):
            self.refused_grants += 1
            return 401, {"error": "invalid_client"}
        answer: dict[str, object] = {}
        if kind == "refresh_token":
            used = form.get("refresh_token", "")
            if used not in self.refresh:
                self.refused_grants += 1
                return 400, {"error": "invalid_grant"}
            self.retire_parent(used)
            if self.options.rotate:
                successor = "rt-" + secrets.token_urlsafe(16)
                self.refresh[successor] = Refresh(used)
                self.refresh[used].children.append(successor)
                answer["refresh_token"] = successor
        elif kind != "client_credentials":
            self.refused_grants += 1
            return 400, {"error": "unsupported_grant_type"}
        token = "at-" + secrets.token_urlsafe(24)
        self.access[token] = time.monotonic() + self.options.token_ttl_s
        self.issued_at.append(time.time())
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.options.token_ttl_s, **answer}

    def retire_parent(self, used: str) -> None:
        """The first use of a rotated refresh token ends its parent and its parent's other successors."""
        parent = self.refresh[used].parent
        if parent is None or parent not in self.refresh:
            return
        for sibling in self.refresh.pop(parent).children:
            if sibling != used:
                self.refresh.pop(sibling, None)
        self.refresh[used].parent = None

    def client_ok(self, headers: dict[bytes, bytes], form: dict[str, str]) -> bool:
        """The client's id and secret, when the task has them, by basic auth or in the form."""
        if self.options.client_id is None:
            return True
        sent = headers.get(b"authorization", b"").decode("latin-1")
        client, secret = form.get("client_id", ""), form.get("client_secret", "")
        if sent.startswith("Basic "):
            try:
                client, _, secret = base64.b64decode(sent[6:]).decode().partition(":")
            except ValueError:
                return False
        return same(client, self.options.client_id) and same(secret, self.options.client_secret or "")

    def revoke(self) -> int:
        """Revoke every access token issued so far."""
        revoked = len(self.access)
        self.access.clear()
        return revoked

    def describe(self) -> dict[str, object]:
        return {
            "token_requests": self.token_requests,
            "grants": self.grants,
            "issued_at": self.issued_at,
            "refused": self.refused,
            "refused_grants": self.refused_grants,
            "refresh_tokens_valid": len(self.refresh),
        }


def same(given: str, expected: str) -> bool:
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())
