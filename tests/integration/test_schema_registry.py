"""The stack's Schema Registry answers the Confluent API a producer and a JVM consumer use: a schema registered under
a topic's subject gets an id, the id gives the schema back, and a subject's compatibility level refuses a change
that breaks its readers before anything is registered."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

CONTENT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def avro(*fields: dict[str, object]) -> str:
    return json.dumps({"type": "record", "name": "Job", "fields": list(fields)})


@pytest.fixture
def registry(stack: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack["CRAWLER_OPS_REGISTRY_URL"], headers=CONTENT, timeout=10) as client:
        yield client


@pytest.fixture
def subject(registry: httpx.Client, unique_id: str) -> Iterator[str]:
    name = f"{unique_id}-value"
    yield name
    registry.delete(f"/subjects/{name}")


def test_a_registered_schema_has_an_id_that_gives_it_back(registry: httpx.Client, subject: str) -> None:
    schema = avro({"name": "id", "type": "string"}, {"name": "aae397", "type": ["null", "string"], "default": None})
    registered = registry.post(f"/subjects/{subject}/versions", json={"schema": schema})
    assert registered.status_code == 200, registered.text
    schema_id = registered.json()["id"]

    assert json.loads(registry.get(f"/schemas/ids/{schema_id}").json()["schema"]) == json.loads(schema)
    again = registry.post(f"/subjects/{subject}/versions", json={"schema": schema})
    assert again.json()["id"] == schema_id, "the same schema registered twice keeps its id"
    assert registry.get(f"/subjects/{subject}/versions").json() == [1]


def test_backward_compatibility_refuses_a_new_required_field_and_accepts_an_optional_one(
    registry: httpx.Client, subject: str
) -> None:
    registry.post(f"/subjects/{subject}/versions", json={"schema": avro({"name": "id", "type": "string"})})
    assert registry.put(f"/config/{subject}", json={"compatibility": "BACKWARD"}).status_code == 200

    def compatible(*fields: dict[str, object]) -> bool:
        answer = registry.post(f"/compatibility/subjects/{subject}/versions/latest", json={"schema": avro(*fields)})
        assert answer.status_code == 200, answer.text
        return bool(answer.json()["is_compatible"])

    assert not compatible({"name": "id", "type": "string"}, {"name": "city", "type": "string"})
    assert compatible({"name": "id", "type": "string"}, {"name": "city", "type": ["null", "string"], "default": None})


def test_json_schemas_are_registered_too(registry: httpx.Client, subject: str) -> None:
    schema = json.dumps({"type": "object", "properties": {"aae397": {"type": "string"}}})
    registered = registry.post(f"/subjects/{subject}/versions", json={"schemaType": "JSON", "schema": schema})
    assert registered.status_code == 200, registered.text
    assert registry.get(f"/schemas/ids/{registered.json()['id']}").json()["schemaType"] == "JSON"
