"""``source.auth``: each type's settings, secrets refused in the YAML, messages that name the task and the field."""

from __future__ import annotations

from typing import Any

import pytest

from crawler_ops.config import SourceConfig, parse_config


def problem(auth: dict[str, Any]) -> str:
    entry = {"id": "partner", "kafka": {"topic": "t"}, "source": {"auth": auth}}
    return parse_config({"tasks": [entry]}, "tasks.yaml").errors["partner"]


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        (
            {"type": "bearer", "token": "abc"},
            "token: secrets never go in the config; put them in the Airflow connection",
        ),
        (
            {"type": "oauth2_client_credentials", "token_url": "/t", "client_secret": "s"},
            "client_secret: secrets never",
        ),
        ({"type": "api_key"}, "type api_key needs 'name'"),
        ({"type": "oauth2_refresh_token"}, "type oauth2_refresh_token needs 'token_url'"),
        ({"type": "oauth2_client_credentials", "token_url": "auth.example.com/t"}, "a whole http(s) URL or a path"),
        (
            {"type": "bearer", "scope": "read"},
            "'scope' applies to type oauth2_client_credentials / oauth2_refresh_token",
        ),
        ({"type": "basic", "in": "query"}, "'in' applies to type api_key only, not basic"),
        ({"type": "digest"}, "Input should be 'none', 'basic'"),
    ],
    ids=["token", "client-secret", "no-name", "no-token-url", "bad-url", "scope", "in", "unknown-type"],
)
def test_a_wrong_auth_names_the_task_and_the_field(auth: dict[str, Any], message: str) -> None:
    found = problem(auth)

    assert found.startswith("tasks.yaml: task 'partner': field 'source.auth") and message in found, found
    assert "abc" not in found, "a secret put in the YAML by mistake is not repeated"


def test_the_default_is_basic_auth_and_a_dumped_config_reads_back_the_same() -> None:
    assert SourceConfig().auth.type == "basic"
    source = SourceConfig(auth={"type": "api_key", "name": "apikey", "in": "query"})

    dumped = source.model_dump(mode="json")

    assert dumped["auth"]["in"] == "query" and SourceConfig.model_validate(dumped) == source
