"""``source.auth``: how requests to the source authenticate, one class per kind, chosen by ``type`` (``basic`` when
none is given). Only the kind and its public settings live here; every secret (password, token, API key, client
secret, refresh token) comes from the Airflow connection ``source.conn_id`` (or the secrets backend behind it), never
from the YAML. The source hook builds each kind's ``httpx.Auth`` (:mod:`crawler_ops.hooks.source.auth`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crawler_ops.config.kinds import kinds_of

#: Keys that would hold a secret: named so the message says where secrets go instead of "extra input".
SECRET_KEYS = frozenset(
    {"password", "secret", "client_secret", "client_id", "token", "access_token", "refresh_token", "api_key", "key",
     "value", "login", "username"}
)  # fmt: skip


class Credential(NamedTuple):
    """What every request carries: HTTP ``basic`` auth (name = login), or a ``header`` or ``query`` parameter."""

    where: Literal["basic", "header", "query"]
    name: str
    value: str


#: A missing secret, as the kinds say it.
NEEDS_PASSWORD = "needs the secret as the connection's password"


class Auth(BaseModel):
    """What every kind of auth answers; a kind is a subclass with its own ``type``."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True)

    #: An OAuth2 kind: its token is shared by every worker on the connection and can be renewed.
    oauth2: ClassVar[bool] = False
    #: Keys of the connection's extra that are this kind's secrets, never sent as headers.
    secret_extra: ClassVar[tuple[str, ...]] = ("token", "client_secret")

    type: str

    @model_validator(mode="before")
    @classmethod
    def _no_secrets_nor_other_kinds_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        found = sorted(SECRET_KEYS & set(data))
        if found:
            raise ValueError(
                f"{', '.join(found)}: secrets never go in the config; put them in the Airflow connection "
                "source.conn_id (login / password / extra), see docs/sources.md"
            )
        own = cls.yaml_keys() | set(cls.model_fields)
        for key in data:
            owners = KEY_OWNERS.get(key, [])
            if key not in own and owners:
                only = " only" if len(owners) == 1 else ""
                raise ValueError(f"'{key}' applies to type {' / '.join(owners)}{only}, not {data.get('type')}")
        return data

    @classmethod
    def yaml_keys(cls) -> set[str]:
        """The keys a YAML entry of this kind may hold."""
        return {field.alias or name for name, field in cls.model_fields.items()}

    def credential(self, login: str | None, password: str | None, extra: Mapping[str, Any]) -> Credential | None:
        """What each request carries, from the connection's secrets (None: nothing); ValueError saying which secret
        is missing. An OAuth2 kind carries a shared token instead (:attr:`oauth2`)."""
        return None


class NoAuth(Auth):
    """Requests carry no credentials."""

    type: Literal["none"] = Field(description="`none`: no credentials")


class BasicAuth(Auth):
    """HTTP basic auth with the connection's login and password, only when it has a login."""

    secret_extra: ClassVar[tuple[str, ...]] = ()

    type: Literal["basic"] = Field(
        "basic", description="`basic`: the connection's login / password, sent only when it has a login"
    )

    def credential(self, login: str | None, password: str | None, extra: Mapping[str, Any]) -> Credential | None:
        return Credential("basic", login, password or "") if login else None


class BearerAuth(Auth):
    """``Authorization: Bearer`` with the connection's password (or its extra's ``token``)."""

    type: Literal["bearer"] = Field(description="`bearer`: the password, or the extra's `token`, as a bearer token")

    def credential(self, login: str | None, password: str | None, extra: Mapping[str, Any]) -> Credential | None:
        secret = password or extra.get("token") or None
        if not secret:
            raise ValueError(NEEDS_PASSWORD)
        return Credential("header", "Authorization", f"Bearer {secret}")


class ApiKeyAuth(Auth):
    """The connection's password as an API key, in a header or a query parameter."""

    type: Literal["api_key"] = Field(description="`api_key`: the password as a header or query parameter `name`")
    name: str = Field(min_length=1, description="the header or query parameter carrying the key (required)")
    location: Literal["header", "query"] = Field(
        "header", alias="in", description="where the key goes, a `header` or a `query` parameter"
    )

    def credential(self, login: str | None, password: str | None, extra: Mapping[str, Any]) -> Credential | None:
        if not password:
            raise ValueError(NEEDS_PASSWORD)
        return Credential(self.location, self.name, password)

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and not data.get("name"):
            raise ValueError("type api_key needs 'name': the header or query parameter that carries the key")
        return data


class OAuth2Auth(Auth):
    """An OAuth2 access token from the provider's token endpoint, shared by every worker on the connection through
    PostgreSQL (``crawler_ops.source_token``)."""

    oauth2: ClassVar[bool] = True
    #: The RFC 6749 grant a token request makes.
    grant_type: ClassVar[str]

    type: str
    token_url: str = Field(
        description="the token endpoint (required), a whole http(s) URL or a path on the source's base URL"
    )
    scope: str | None = Field(None, description="the scope asked for (space-separated), if any")
    client_auth: Literal["basic", "body"] = Field(
        "basic",
        description="how the client id and secret reach the token endpoint: HTTP `basic` auth (client_secret_basic) "
        "or form fields `client_id` / `client_secret` in the `body` (client_secret_post)",
    )

    @abstractmethod
    def secrets(
        self, login: str | None, password: str | None, extra: Mapping[str, Any]
    ) -> tuple[str | None, str | None, str | None]:
        """The client id, the client secret and the first refresh token, from the connection; ValueError saying
        what is missing."""

    def grant(self, refresh_token: str | None) -> dict[str, str]:
        """The form fields of a token request that name the grant (``refresh_token``: the newest one known)."""
        return {"grant_type": self.grant_type}

    @model_validator(mode="before")
    @classmethod
    def _token_url(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            url = str(data.get("token_url") or "")
            if not (url.startswith(("http://", "https://")) or url.startswith("/")):
                raise ValueError(
                    f"type {data.get('type')} needs 'token_url': the token endpoint, a whole http(s) URL or a path "
                    "starting with / on the source's base URL"
                )
        return data


class ClientCredentialsAuth(OAuth2Auth):
    """Client id = the connection's login, client secret = its password (RFC 6749 §4.4)."""

    grant_type: ClassVar[str] = "client_credentials"

    type: Literal["oauth2_client_credentials"] = Field(
        description="`oauth2_client_credentials`: client id = login, client secret = password"
    )

    def secrets(
        self, login: str | None, password: str | None, extra: Mapping[str, Any]
    ) -> tuple[str | None, str | None, str | None]:
        if not (login and password):
            raise ValueError("needs the client id as the connection's login and the client secret as its password")
        return login, password, None


class RefreshTokenAuth(OAuth2Auth):
    """The first refresh token = the connection's password; client id = its login and client secret = its extra's
    ``client_secret``, if the provider wants them (RFC 6749 §6)."""

    grant_type: ClassVar[str] = "refresh_token"

    type: Literal["oauth2_refresh_token"] = Field(
        description="`oauth2_refresh_token`: the first refresh token = password; client id = login, client secret "
        "= the extra's `client_secret`"
    )

    def secrets(
        self, login: str | None, password: str | None, extra: Mapping[str, Any]
    ) -> tuple[str | None, str | None, str | None]:
        if not password:
            raise ValueError("needs the first refresh token as the connection's password")
        return login, extra.get("client_secret") or None, password

    def grant(self, refresh_token: str | None) -> dict[str, str]:
        return {"grant_type": self.grant_type, "refresh_token": refresh_token or ""}


SourceAuth = Annotated[
    NoAuth | BasicAuth | BearerAuth | ApiKeyAuth | ClientCredentialsAuth | RefreshTokenAuth,
    Field(discriminator="type"),
]
#: Each kind by its ``type``.
KINDS: dict[str, type[Auth]] = kinds_of(SourceAuth)  # type: ignore[assignment]
#: The kinds that take each key.
KEY_OWNERS: dict[str, list[str]] = {}
for _name, _kind in KINDS.items():
    for _key in _kind.yaml_keys():
        KEY_OWNERS.setdefault(_key, []).append(_name)
