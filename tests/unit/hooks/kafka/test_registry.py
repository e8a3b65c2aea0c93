"""The Schema Registry hook's answer to a registration refused as a conflict: Apicurio refuses one that raced another
registration under the same subject ("artifact already exists") though the schema is then there; an incompatible
schema is refused the same way and must stay refused. The registry is an in-process httpx transport answering as
Apicurio's Confluent-compatible API does (a race cannot be provoked on demand against the real one)."""

from __future__ import annotations

import json

import httpx
import pytest

from crawler_ops.errors import RegistryError
from crawler_ops.hooks.kafka.registry import SchemaRegistryHook

SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}


def hook_with(registered: dict[str, int], asked: list[str]) -> SchemaRegistryHook:
    """A hook whose registry refuses every registration with 409 and knows the schemas ``registered`` (text -> id)."""

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url.path}")
        schema = json.loads(request.content)["schema"]
        if request.url.path.endswith("/versions"):
            return httpx.Response(
                409, json={"error_code": 409, "message": "An artifact with ID 's-value' already exists."}
            )
        if schema in registered:
            return httpx.Response(200, json={"subject": "s-value", "id": registered[schema], "version": 1})
        return httpx.Response(404, json={"error_code": 40403, "message": "Schema not found"})

    hook = SchemaRegistryHook("registry_under_test")
    hook._client = httpx.Client(base_url="http://registry", transport=httpx.MockTransport(answer))
    return hook


def test_a_registration_refused_as_a_conflict_returns_the_id_of_the_schema_found_under_the_subject() -> None:
    asked: list[str] = []
    hook = hook_with({json.dumps(SCHEMA, separators=(",", ":")): 7}, asked)

    assert hook.register("s-value", SCHEMA, "JSON") == 7
    assert asked == ["POST /subjects/s-value/versions", "POST /subjects/s-value"]


def test_a_conflict_whose_schema_is_not_under_the_subject_stays_refused() -> None:
    asked: list[str] = []
    hook = hook_with({}, asked)

    with pytest.raises(RegistryError, match=r"registering a schema under 's-value': HTTP 409: An artifact") as refused:
        hook.register("s-value", SCHEMA, "JSON")
    assert (refused.value.status, refused.value.retriable) == (409, False)
    assert "connection 'registry_under_test'" in str(refused.value)
    assert asked == ["POST /subjects/s-value/versions", "POST /subjects/s-value"]


def test_a_registry_answering_503_is_asked_again_and_its_answer_used(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[float] = []
    answers = [httpx.Response(503, headers={"Retry-After": "0"}), httpx.Response(200, json={"id": 4})]

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(1)
        return answers[len(asked) - 1]

    hook = SchemaRegistryHook("registry_under_test")
    hook._client = httpx.Client(base_url="http://registry", transport=httpx.MockTransport(answer))

    assert hook.register("s-value", SCHEMA, "JSON") == 4
    assert len(asked) == 2
