"""The stack's Schema Registry answers the Confluent API a producer and a JVM consumer use: a schema registered under
a topic's subject gets an id, the id gives the schema back, and a subject's compatibility level refuses a change
that breaks its readers before anything is registered. The same through :class:`SchemaRegistryHook` and its
Airflow connection, with the errors it gives."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from crawler_ops.errors import RegistryError
from crawler_ops.hooks.kafka.registry import SchemaRegistryHook, framed, subject_of, unframed
from crawler_ops.message.schemas import incompatible_fields, json_schema_breaks

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


@pytest.fixture
def hook(stack: dict[str, str]) -> Iterator[SchemaRegistryHook]:
    registry = SchemaRegistryHook()  # the stack's AIRFLOW_CONN_SCHEMA_REGISTRY
    yield registry
    registry.close()


def test_the_hook_registers_reads_back_and_checks_compatibility(hook: SchemaRegistryHook, subject: str) -> None:
    first = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    assert hook.latest(subject) is None
    schema_id = hook.register(subject, first, "JSON")
    latest = hook.latest(subject)
    assert latest is not None and (latest.id, latest.version, latest.schema, latest.schema_type) == (
        schema_id,
        1,
        first,
        "JSON",
    )
    assert hook.schema(schema_id) == first
    assert hook.register(subject, first, "JSON") == schema_id, "an existing version keeps its id"

    hook.client.put(f"/config/{subject}", json={"compatibility": "BACKWARD"})
    narrower = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    assert hook.compatible(subject, {**first, "required": []}, "JSON")
    assert not hook.compatible(subject, narrower, "JSON")
    with pytest.raises(RegistryError, match=rf"registering a schema under '{subject}': HTTP 409") as refused:
        hook.register(subject, narrower, "JSON")
    assert refused.value.retriable is False and "connection 'schema_registry'" in str(refused.value)


def test_an_unknown_id_and_a_registry_that_does_not_answer_are_named(
    hook: SchemaRegistryHook, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RegistryError, match="schema id 987654321: HTTP 404") as unknown:
        hook.schema(987654321)
    assert unknown.value.retriable is False

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_REGISTRY_DOWN", json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{port}"})
    )
    down = SchemaRegistryHook("registry_down", timeout_s=2)
    with pytest.raises(RegistryError, match=r"connection 'registry_down'.*subject 'x-value'") as failed:
        down.latest("x-value")
    assert failed.value.retriable is True


def test_a_framed_value_is_the_magic_byte_the_id_and_the_payload() -> None:
    value = framed(258) + b'{"id":"a"}'
    assert value[:5] == bytes([0, 0, 0, 1, 2])
    assert unframed(value) == (258, b'{"id":"a"}')
    with pytest.raises(ValueError, match="not a value framed"):
        unframed(b'{"id":"a"}')
    assert subject_of("jobs.beijing") == "jobs.beijing-value"


def obj(properties: dict[str, Any], required: tuple[str, ...] = (), closed: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


STRING, INTEGER, NUMBER = {"type": "string"}, {"type": "integer"}, {"type": "number"}
CHANGES = {
    "the same": (obj({"id": STRING}, ("id",)), obj({"id": STRING}, ("id",))),
    "an optional property added to an open object": (obj({"id": STRING}), obj({"id": STRING, "city": STRING})),
    "an optional property added to a closed object": (
        obj({"id": STRING}, closed=True),
        obj({"id": STRING, "city": STRING}, closed=True),
    ),
    "integer widened to number": (obj({"n": INTEGER}), obj({"n": NUMBER})),
    "number narrowed to integer": (obj({"n": NUMBER}), obj({"n": INTEGER})),
    "a property now required": (obj({"id": STRING}), obj({"id": STRING}, ("id",))),
    "a property no longer required": (obj({"id": STRING}, ("id",)), obj({"id": STRING})),
    "a property dropped from an open object": (obj({"id": STRING, "city": STRING}), obj({"id": STRING})),
    "a property dropped from a closed object": (
        obj({"id": STRING, "city": STRING}, closed=True),
        obj({"id": STRING}, closed=True),
    ),
    "a nested type changed": (obj({"shop": obj({"n": INTEGER})}), obj({"shop": obj({"n": STRING})})),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_breaks_named_agree_with_the_registrys_backward_check(
    hook: SchemaRegistryHook, subject: str, change: str
) -> None:
    """``schemas.json_schema_breaks`` names a break exactly when the registry refuses the change: the names a failed
    plan gives are the registry's reasons."""
    old, new = CHANGES[change]
    hook.register(subject, old, "JSON")
    hook.client.put(f"/config/{subject}", json={"compatibility": "BACKWARD"})
    assert hook.compatible(subject, new, "JSON") == (json_schema_breaks(old, new) == []), json_schema_breaks(old, new)


def record(*fields: dict[str, Any], name: str = "Job") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


ID, CITY = {"name": "id", "type": "string"}, {"name": "city", "type": ["null", "string"], "default": None}
AVRO_CHANGES = {
    "the same": (record(ID), record(ID)),
    "a field added with a default": (record(ID), record(ID, CITY)),
    "a field added without a default": (record(ID), record(ID, {"name": "city", "type": "string"})),
    "a field dropped": (record(ID, CITY), record(ID)),
    "long promoted to double": (record({"name": "n", "type": "long"}), record({"name": "n", "type": "double"})),
    "long changed to string": (record({"name": "n", "type": "long"}), record({"name": "n", "type": "string"})),
    "a nested field retyped": (
        record({"name": "shop", "type": record({"name": "n", "type": "long"}, name="Shop")}),
        record({"name": "shop", "type": record({"name": "n", "type": "boolean"}, name="Shop")}),
    ),
}


@pytest.mark.parametrize("change", list(AVRO_CHANGES))
def test_the_avro_breaks_named_agree_with_the_registrys_backward_check(
    hook: SchemaRegistryHook, subject: str, change: str
) -> None:
    old, new = AVRO_CHANGES[change]
    hook.register(subject, old, "AVRO")
    hook.client.put(f"/config/{subject}", json={"compatibility": "BACKWARD"})
    assert hook.compatible(subject, new, "AVRO") == (incompatible_fields(old, new) == []), incompatible_fields(old, new)
