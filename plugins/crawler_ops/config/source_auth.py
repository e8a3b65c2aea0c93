"""``source.auth``: how requests to the source authenticate. Only the kind and its public settings live here; every
secret (password, token, API key, client secret, refresh token) comes from the Airflow connection ``source.conn_id``
(or the secrets backend behind it), never from the YAML."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AuthType = Literal["none", "basic", "bearer", "api_key", "oauth2_client_credentials", "oauth2_refresh_token"]
OAUTH2_TYPES = ("oauth2_client_credentials", "oauth2_refresh_token")
#: Keys that would hold a secret: named so the message says where secrets go instead of "extra input".
SECRET_KEYS = frozenset(
    {"password", "secret", "client_secret", "client_id", "token", "access_token", "refresh_token", "api_key", "key",
     "value", "login", "username"}
)  # fmt: skip
#: Which types may set each optional key (the others must leave it out).
APPLIES_TO: dict[str, tuple[str, ...]] = {
    "name": ("api_key",),
    "location": ("api_key",),
    "token_url": OAUTH2_TYPES,
    "scope": OAUTH2_TYPES,
    "client_auth": OAUTH2_TYPES,
}


class SourceAuth(BaseModel):
    """How requests to the source authenticate; secrets come from the source's Airflow connection only: `basic`
    (login / password), `bearer` (the password, or the extra's `token`), `api_key` (the password, sent as header or
    query parameter `name`), `oauth2_client_credentials` (client id = login, client secret = password) and
    `oauth2_refresh_token` (the first refresh token = password; client id = login and client secret = the extra's
    `client_secret`, if the provider wants them). An OAuth2 access token is shared by every worker on the connection
    through PostgreSQL (`crawler_ops.source_token`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True)

    type: AuthType = Field(
        "basic",
        description="`none`, `basic`, `bearer`, `api_key`, `oauth2_client_credentials` or `oauth2_refresh_token`; "
        "`basic` sends the connection's login / password only when it has a login (no auth without one)",
    )
    name: str | None = Field(
        None, min_length=1, description="api_key: the header or query parameter carrying the key (required)"
    )
    location: Literal["header", "query"] = Field(
        "header", alias="in", description="api_key: where the key goes, a `header` or a `query` parameter"
    )
    token_url: str | None = Field(
        None,
        description="oauth2: the token endpoint (required), a whole http(s) URL or a path on the source's base URL",
    )
    scope: str | None = Field(None, description="oauth2: the scope asked for (space-separated), if any")
    client_auth: Literal["basic", "body"] = Field(
        "basic",
        description="oauth2: how the client id and secret reach the token endpoint: HTTP `basic` auth "
        "(client_secret_basic) or form fields `client_id` / `client_secret` in the `body` (client_secret_post)",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict):
            found = sorted(SECRET_KEYS & set(data))
            if found:
                raise ValueError(
                    f"{', '.join(found)}: secrets never go in the config; put them in the Airflow connection "
                    "source.conn_id (login / password / extra), see docs/sources.md"
                )
        return data

    @model_validator(mode="after")
    def _fits_type(self) -> SourceAuth:
        for key, types in APPLIES_TO.items():
            # A key at its default is no setting (a config written back by model_dump holds every key).
            if getattr(self, key) != type(self).model_fields[key].default and self.type not in types:
                shown = "in" if key == "location" else key
                raise ValueError(f"'{shown}' applies to type {' / '.join(types)} only, not {self.type}")
        if self.type == "api_key" and not self.name:
            raise ValueError("type api_key needs 'name': the header or query parameter that carries the key")
        if self.type in OAUTH2_TYPES:
            url = self.token_url or ""
            if not (url.startswith(("http://", "https://")) or url.startswith("/")):
                raise ValueError(
                    f"type {self.type} needs 'token_url': the token endpoint, a whole http(s) URL or a path "
                    "starting with / on the source's base URL"
                )
        return self

    @property
    def oauth2(self) -> bool:
        return self.type in OAUTH2_TYPES
