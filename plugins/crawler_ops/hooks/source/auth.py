"""How requests to a source authenticate (``source.auth``), as ``httpx.Auth`` objects the source client applies.

Secrets come from the Airflow connection only: ``basic`` (login / password), ``bearer`` (password, or the extra's
``token``), ``api_key`` (password, as a header or query parameter), ``oauth2_client_credentials`` (client id = login,
client secret = password) and ``oauth2_refresh_token`` (first refresh token = password; client id = login and client
secret = the extra's ``client_secret`` when given). An OAuth2 token is shared by every worker through PostgreSQL
(:mod:`crawler_ops.hooks.source.tokens`); a 401 with it leads to one renewal and one retry of the request.

No secret reaches a log line or an error message: every secret an auth object uses is registered with
:func:`redact`, which errors about the source pass their text through, and a filter on httpx's logger (which logs
each request's URL, an API key in the query included) masks them in its lines.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Generator
from typing import Any
from urllib.parse import quote, quote_plus

import httpx

from crawler_ops.config import SourceConfig
from crawler_ops.config.source_auth import OAuth2Auth as OAuth2Kind
from crawler_ops.errors import SourceError, StatusTableError
from crawler_ops.hooks.answers import read_bounded
from crawler_ops.hooks.http import DeadlineTransport, deadline, environment_proxy
from crawler_ops.hooks.source.tokens import DEFAULT_LIFETIME_S, MAX_LIFETIME_S, Grant, Issued, SharedToken, seed_of
from crawler_ops.retry import RETRIABLE_STATUS, RetryPolicy, retry_after_seconds

TOKEN_BODY_BYTES = 64 * 1024
MASK = "***"
_OAUTH_ERROR = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: A secret sent in a header: printable ASCII, no space at either end, at most MAX_HEADER_SECRET characters. Anything
#: else (a line break copied with it, a control character) makes the HTTP client fail with the header quoted.
_HEADER_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
MAX_HEADER_SECRET = 8192

_secrets: deque[str] = deque(maxlen=1000)
_secrets_lock = threading.Lock()


def remember(*secrets: str | None) -> None:
    """Secrets :func:`redact` masks from now on (only those of 4 characters or more: shorter ones are no secret and
    would mask ordinary text), each also as a URL writes it (percent-encoded: an API key in a logged query)."""
    with _secrets_lock:
        for secret in secrets:
            if not secret or len(secret) < 4:
                continue
            for form in dict.fromkeys((secret, quote(secret, safe=""), quote_plus(secret, safe=""))):
                if form not in _secrets:
                    _secrets.append(form)


def sendable(value: str) -> bool:
    """Whether ``value`` can go in a request header as it is (see ``_HEADER_VALUE``)."""
    return len(value) <= MAX_HEADER_SECRET and _HEADER_VALUE.fullmatch(value) is not None


def redact(text: str) -> str:
    """``text`` with every secret an auth object of this process used replaced by ``***``."""
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactingFilter(logging.Filter):
    """Masks the secrets in the lines of a logger (httpx logs each request's URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _secrets:
            message = record.getMessage()
            masked = redact(message)
            if masked != message:
                record.msg, record.args = masked, None
        return True


_filter = RedactingFilter()
for _name in ("httpx", "httpcore"):
    if _filter not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_filter)


class HeaderAuth(httpx.Auth):
    """A fixed header on every request (``Authorization: Bearer <token>``, an API key header)."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers[self.name] = self.value
        yield request


class QueryAuth(httpx.Auth):
    """A fixed query parameter on every request (an API key in the URL)."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.url = request.url.copy_set_param(self.name, self.value)
        yield request


class OAuth2Auth(httpx.Auth):
    """``Authorization: Bearer`` with the connection's shared OAuth2 token; a 401 renews it (unless another worker
    already did) and retries the request once.

    :param grant: how a token is asked for.
    :param token: this process's shared token of the connection.
    """

    def __init__(self, grant: Grant, token: SharedToken) -> None:
        self.grant, self.token = grant, token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self.shared(self.token.current, self.grant)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401:
            return
        token = self.shared(self.token.renew, self.grant, token)
        request.headers["Authorization"] = f"Bearer {token}"
        yield request

    def renew(self, authorization: str | None) -> None:
        """A rule of ``source.responses`` found the token of a request (its ``Authorization`` header) expired: renew
        the shared token, unless another worker already did."""
        failed = (authorization or "").removeprefix("Bearer ")
        self.shared(self.token.renew, self.grant, failed)

    def shared(self, step: Callable[..., str], *args: Any) -> str:
        """The token from the shared row; PostgreSQL failing there fails the request, retriable, naming the task."""
        try:
            token = step(*args)
        except StatusTableError as exc:
            raise SourceError(f"task {self.grant.label}: {exc}", retriable=True) from exc
        remember(token)
        return token


class TokenGrant:
    """A token request to the provider (RFC 6749 §4.4 client credentials, §6 refresh token), bounded by the source's
    deadline and retried like a page request.

    :param conn: the source's Airflow connection (client id, secret, first refresh token).
    :param source: the source config (auth, deadline, retries).
    :param base: the source's base URL, for a token_url that is a path.
    :param label: names the task in errors.
    """

    def __init__(self, conn: Any, source: SourceConfig, base: str, label: str) -> None:
        self.source, self.label = source, label
        if not isinstance(source.auth, OAuth2Kind):
            raise TypeError(f"auth {source.auth.type} asks for no token")
        self.auth = source.auth
        token_url = self.auth.token_url
        self.url = token_url if "://" in token_url else base.rstrip("/") + token_url
        try:
            self.client_id, self.client_secret, first = self.auth.secrets(
                conn.login or None, conn.password or None, conn.extra_dejson or {}
            )
        except ValueError as exc:
            raise self.error(str(exc)) from None
        self.first_refresh = first
        self.seed = seed_of(first) if first else None
        remember(self.client_secret, first)

    def error(self, why: str, retriable: bool = False) -> SourceError:
        return SourceError(
            f"task {self.label}: auth {self.auth.type} of source connection '{self.source.conn_id}' {why}",
            retriable=retriable,
        )

    @property
    def retry(self) -> RetryPolicy:
        """How a failed token request is tried again (the source's policy), by the caller, outside the row lock."""
        return self.source.retry

    def request(self, refresh_token: str | None) -> Issued:
        """One token request (no retry: the caller holds the token row meanwhile, and retries after releasing it)."""
        form = self.auth.grant(refresh_token or self.first_refresh)
        if self.auth.scope:
            form["scope"] = self.auth.scope
        basic = None
        if self.client_id and self.auth.client_auth == "basic":
            basic = httpx.BasicAuth(self.client_id, self.client_secret or "")
        elif self.client_id:
            form["client_id"] = self.client_id
            if self.client_secret:
                form["client_secret"] = self.client_secret
        return self.post(form, basic)

    def post(self, form: dict[str, str], basic: httpx.Auth | None) -> Issued:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=0)
        transport = DeadlineTransport(self.url.lower().startswith("https://"), limits, environment_proxy(self.url))
        what = f"token request to {self.url}"
        with (
            deadline(self.source.deadline_s),
            httpx.Client(transport=transport, timeout=httpx.Timeout(self.source.timeout_s)) as client,
        ):
            try:
                with client.stream("POST", self.url, data=form, auth=basic) as response:
                    body = read_bounded(response, TOKEN_BODY_BYTES, what, "answer", "64 KiB")
                    status = response.status_code
                    retry_after = retry_after_seconds(
                        response.headers.get("retry-after"), self.source.max_retry_after_s
                    )
            except httpx.TimeoutException as exc:
                raise self.error(f"{what} timed out", retriable=True) from exc
            except httpx.TransportError as exc:
                raise self.error(f"{what} failed: {redact(repr(exc))}", retriable=True) from exc
        document = parse_json(body)
        if status != 200:
            code = document.get("error") if isinstance(document, dict) else None
            shown = f" ({code})" if isinstance(code, str) and _OAUTH_ERROR.match(code) else ""
            failure = self.error(f"{what} answered HTTP {status}{shown}", status in RETRIABLE_STATUS)
            failure.retry_after = retry_after
            raise failure
        return self.issued(document, what)

    def issued(self, document: Any, what: str) -> Issued:
        token = document.get("access_token") if isinstance(document, dict) else None
        if not isinstance(token, str) or not token:
            raise self.error(f"{what}: the answer holds no access_token", retriable=True)
        if not sendable(token):
            raise self.error(
                f"{what}: the answer's access_token cannot be sent in a header (a line break, a space at an end, a "
                f"control or non-ASCII character, or over {MAX_HEADER_SECRET} characters); not stored",
                retriable=True,
            )
        expires_in = document.get("expires_in", DEFAULT_LIFETIME_S)
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in) if len(expires_in) < 20 else MAX_LIFETIME_S
        if not isinstance(expires_in, int | float) or isinstance(expires_in, bool) or not expires_in > 0:
            expires_in = DEFAULT_LIFETIME_S
        expires_in = min(expires_in, MAX_LIFETIME_S)  # a year at most: PostgreSQL's intervals, Python's floats
        refresh = document.get("refresh_token")
        refresh = refresh if isinstance(refresh, str) and refresh else None
        remember(token, refresh)
        return Issued(token, float(expires_in), refresh)


def parse_json(body: bytes) -> Any:
    import json

    try:
        return json.loads(body)
    except ValueError:
        return None


def extra_headers(conn: Any, source: SourceConfig) -> dict[str, str]:
    """The connection's extra as HTTP headers: its text values, but the secrets of the auth type."""
    skip = source.auth.secret_extra
    extra = conn.extra_dejson or {}
    return {str(k): str(v) for k, v in extra.items() if not isinstance(v, (dict, list)) and k not in skip}


#: How a credential of the connection goes on every request.
CARRIERS: dict[str, Callable[[str, str], httpx.Auth]] = {
    "basic": httpx.BasicAuth,
    "header": HeaderAuth,
    "query": QueryAuth,
}


def source_auth(conn: Any, source: SourceConfig, base: str, label: str, token: SharedToken | None) -> httpx.Auth | None:
    """The auth of ``source.auth`` with the connection's secrets: the kind's credential on every request, or, for an
    OAuth2 kind, the connection's shared token (``token``, :func:`crawler_ops.hooks.source.tokens.shared_token`)."""
    auth = source.auth
    if auth.oauth2:
        if token is None:
            raise SourceError(
                f"task {label}: auth {auth.type} of source connection '{source.conn_id}' shares its token through "
                "the crawler database; this caller has none",
                retriable=False,
            )
        return OAuth2Auth(TokenGrant(conn, source, base, label), token)
    try:
        credential = auth.credential(conn.login or None, conn.password or None, conn.extra_dejson or {})
    except ValueError as exc:
        raise SourceError(
            f"task {label}: auth {auth.type} of source connection '{source.conn_id}' {exc}", retriable=False
        ) from None
    if credential is None:
        return None
    remember(credential.value)
    if credential.where == "header" and not sendable(credential.value):
        raise SourceError(
            f"task {label}: auth {auth.type} of source connection '{source.conn_id}': its secret cannot be sent in "
            "a header (a line break or a space at an end, a control or non-ASCII character, or over "
            f"{MAX_HEADER_SECRET} characters); set it again in the connection, without the line break",
            retriable=False,
        )
    return CARRIERS[credential.where](credential.name, credential.value)
