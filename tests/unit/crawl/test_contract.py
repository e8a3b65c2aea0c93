"""The value-schema contract of crawler_ops.crawl.contract alone: what plan settles with a Schema Registry (an
in-process registry answering the Confluent API as Apicurio's does, through httpx.MockTransport), before anything
is produced. The same rules run against the real registry in tests/integration/test_schema_registry.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl import contract
from crawler_ops.crawl.contract import Settled, decoded_records, describe, settle_value_schema
from crawler_ops.errors import SourceError
from crawler_ops.hooks.kafka.registry import SchemaRegistryHook
from crawler_ops.message.schemas import json_schema

SUBJECT = "jobs-value"
RECORDS = [{"id": "1", "title": "a"}, {"id": "2", "title": "b"}]


class Registry:
    """Subjects and their versions; registering a schema equal to a version answers that version's id."""

    def __init__(self) -> None:
        self.versions: dict[str, list[tuple[int, dict[str, Any], str]]] = {}
        self.registered: list[dict[str, Any]] = []
        self.next_id = 1

    def add(self, subject: str, schema: dict[str, Any], kind: str = "JSON") -> int:
        for schema_id, known, _ in self.versions.get(subject, []):
            if known == schema:
                return schema_id
        schema_id, self.next_id = self.next_id, self.next_id + 1
        self.versions.setdefault(subject, []).append((schema_id, schema, kind))
        return schema_id

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        subject = path.split("/")[2] if path.startswith("/subjects/") else ""
        if request.method == "GET" and path.endswith("/versions/latest"):
            if not self.versions.get(subject):
                return httpx.Response(404, json={"error_code": 40401, "message": "Subject not found"})
            schema_id, schema, kind = self.versions[subject][-1]
            version = len(self.versions[subject])
            body = {"id": schema_id, "version": version, "schema": json.dumps(schema), "schemaType": kind}
            return httpx.Response(200, json=body)
        sent = json.loads(request.content)
        schema = json.loads(sent["schema"])
        if path.startswith("/compatibility/"):
            return httpx.Response(200, json={"is_compatible": True})
        if path.endswith("/versions"):
            self.registered.append(schema)
            return httpx.Response(200, json={"id": self.add(subject, schema, sent["schemaType"])})
        return httpx.Response(404, json={"error_code": 40403, "message": "Schema not found"})


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    served = Registry()

    def hook(conn_id: str) -> SchemaRegistryHook:
        made = SchemaRegistryHook(conn_id)
        made._client = httpx.Client(base_url="http://registry", transport=httpx.MockTransport(served.answer))
        return made

    monkeypatch.setattr(contract, "SchemaRegistryHook", hook)
    return served


def task(contract_name: str | None = None, **kafka: Any) -> CrawlTaskConfig:
    section = {"topic": "jobs", "key_field": "id", "value_format": "json_schema", **kafka}
    if contract_name is not None:
        section["contract"] = contract_name
    return CrawlTaskConfig.model_validate({"id": "jobs", "kafka": section})


def test_a_new_subject_gets_a_schema_inferred_from_the_newest_records(registry):
    settled = settle_value_schema(task(), lambda: RECORDS)

    assert settled == Settled(1)
    (schema,) = registry.registered
    assert set(schema["properties"]) == {"id", "title"} and schema["additionalProperties"] is False


def test_a_dry_run_of_a_new_subject_registers_nothing_and_has_no_id_to_frame_with(registry):
    assert settle_value_schema(task(), lambda: RECORDS, dry_run=True) is None
    assert registry.registered == []


def test_an_empty_source_of_a_new_subject_settles_nothing(registry):
    assert settle_value_schema(task(), lambda: []) is None
    assert registry.registered == []


def test_the_given_schema_equal_to_the_latest_version_is_used_without_registering(registry):
    given = json_schema(RECORDS, title="jobs", closed=True, loose=True)
    registry.add(SUBJECT, given)

    assert settle_value_schema(task(value_schema=given), lambda: RECORDS) == Settled(1)
    assert registry.registered == []


def test_a_given_schema_that_cannot_read_what_the_latest_version_wrote_fails_the_plan_naming_the_field(registry):
    registry.add(SUBJECT, json_schema(RECORDS, title="jobs", closed=True, loose=True))
    narrower = {"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": False}

    with pytest.raises(SourceError, match=r"not compatible with version 1 of subject 'jobs-value'.*title") as failed:
        settle_value_schema(task(value_schema=narrower), lambda: RECORDS)
    assert failed.value.retriable is False and registry.registered == []


def test_a_subject_of_another_format_is_refused(registry):
    registry.add(SUBJECT, {"type": "record", "name": "jobs", "fields": []}, kind="AVRO")

    with pytest.raises(SourceError, match=r"holds AVRO schemas, but kafka.value_format is json_schema"):
        settle_value_schema(task(), lambda: RECORDS)


@pytest.fixture
def narrow_subject(registry: Registry) -> Registry:
    """A subject whose latest version knows ``id`` only, while the newest records carry ``title`` too."""
    only_id = [{"id": "1"}]
    registry.add(SUBJECT, json_schema(only_id, title="jobs", closed=True, loose=True))
    return registry


def test_freeze_fails_the_plan_naming_the_field_and_how_many_records_do_not_fit(narrow_subject):
    with pytest.raises(SourceError, match=r"title.*\(2 of 2 records\).*contract freeze"):
        settle_value_schema(task("freeze"), lambda: RECORDS)
    assert narrow_subject.registered == []


def test_discard_row_keeps_the_schema_and_notes_what_will_be_dead_lettered(narrow_subject):
    settled = settle_value_schema(task("discard_row"), lambda: RECORDS)

    assert settled is not None and settled.schema_id == 1 and "dead-lettered" in str(settled.note)
    assert narrow_subject.registered == []


def test_evolve_registers_a_widened_version_that_reads_both(narrow_subject):
    settled = settle_value_schema(task("evolve"), lambda: RECORDS)

    assert settled is not None and settled.schema_id == 2 and "evolved from id 1 to 2" in str(settled.note)
    (wider,) = narrow_subject.registered
    assert set(wider["properties"]) == {"id", "title"}


def test_a_reason_is_counted_once_and_records_that_do_not_decode_are_left_to_filtering():
    unfit = [({}, "field 'x' is not in the schema")] * 3 + [({}, "field 'y' is null")]
    assert (
        describe(unfit, 10) == "field 'x' is not in the schema (3 of 10 records); field 'y' is null (1 of 10 records)"
    )
    assert decoded_records([{"a": 1}, [1, 2], "text"], None) == [{"a": 1}]
    assert decoded_records([{"a": 1}], lambda record: 1 / 0) == []
