"""kafka.value_format json_schema and avro on the real stack: the values a consumer reads are framed with the id of
a schema the real registry holds under ``<topic>-value``, and decode with that schema to exactly the source's records;
a source that changes shape is stopped in plan (freeze, nothing produced), evolves the subject (evolve), or has its
records dead-lettered naming the field (discard_row)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest

from crawler_ops.crawl.batch_filter import BatchFilter
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.hooks.kafka.registry import SchemaRegistryHook, subject_of
from crawler_ops.message.schemas import avro_schema
from crawler_ops.message.values import json_name, unframed
from crawler_ops.planning import Batch
from tests.support import REPO, make_task, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def registry() -> SchemaRegistryHook:
    assert os.environ.get("AIRFLOW_CONN_SCHEMA_REGISTRY"), "the stack defines the registry connection"
    return SchemaRegistryHook()


def framed_values(bootstrap: str, topic: str) -> list[tuple[str, int, Any]]:
    """(key, schema id, record) of every message, each value decoded with the schema its id names in the registry
    (Avro fields renamed back to the record's own names), as a consumer with the registry's deserializer reads it."""
    hook = registry()
    schemas: dict[int, dict[str, Any]] = {}
    out = []
    for message in read_topic(bootstrap, topic, decode=bytes):
        schema_id, payload = unframed(message.value)
        if schema_id not in schemas:
            schemas[schema_id] = hook.schema(schema_id)
        schema = schemas[schema_id]
        if schema.get("type") == "record":
            read = fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(schema))
            names = {field["name"]: json_name(field) for field in schema["fields"]}
            record = {names[name]: value for name, value in read.items()}  # type: ignore[union-attr]
        else:
            record = json.loads(payload)
        out.append((message.key, schema_id, record))
    hook.close()
    return out


def as_sent(record: dict[str, Any], schema_fields: set[str]) -> dict[str, Any]:
    """A source record as an Avro value holds it: every schema field, null where the record has none."""
    return {name: record.get(name) for name in schema_fields}


@pytest.mark.parametrize("value_format", ["json_schema", "avro"])
def test_values_decode_with_the_registered_schema_to_the_source_records(
    source, kafka_bootstrap, unique_id, run_dag, value_format
):
    source.create(unique_id, total=300, ref=REF, in_window_share=0.7)
    cfg = make_task(unique_id, kafka={"value_format": value_format})

    assert run_dag(cfg, REF) == "success"

    latest = registry().latest(subject_of(cfg.kafka.topic))
    assert latest is not None and latest.version == 1
    assert latest.schema_type == ("AVRO" if value_format == "avro" else "JSON")
    read = framed_values(kafka_bootstrap, cfg.kafka.topic)
    truth = {r["id"]: r for r in source.records(unique_id, 0, 300)}
    kept = set(source.truth(unique_id, REF, days=cfg.filter.days)["in_window_ids"])
    assert 150 < len(read) < 300
    assert {schema_id for _, schema_id, _ in read} == {latest.id}
    for key, _, record in read:
        expected = truth[key]
        if value_format == "avro":
            assert record == as_sent(expected, set(record)), key
            assert set(expected) <= set(record)
        else:
            assert record == expected, key
    assert {key for key, _, _ in read} == kept


@pytest.mark.parametrize("value_format", ["json_schema", "avro"])
def test_a_new_field_under_freeze_fails_the_plan_naming_it_and_nothing_is_produced(
    source, kafka_bootstrap, unique_id, run_dag, value_format, pg_uri
):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"value_format": value_format})
    assert run_dag(cfg, REF) == "success"
    before = read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes)
    mark = watermark(pg_uri, unique_id)

    source.faults(unique_id, set_fields={"bonus": 5})
    source.append(unique_id, 100)
    assert run_dag(cfg, REF) == "failed"

    assert len(read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes)) == len(before)
    assert watermark(pg_uri, unique_id) == mark
    run = run_record(pg_uri, unique_id)
    error = " ".join(run["errors"])
    assert "field 'bonus' is not in the schema (100 of 100 records)" in error, error
    assert "contract freeze" in error and "Nothing was produced" in error


def test_evolve_registers_a_widened_version_and_old_and_new_values_both_decode(
    source, kafka_bootstrap, unique_id, run_dag
):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"value_format": "avro", "contract": "evolve"})
    assert run_dag(cfg, REF) == "success"
    first = registry().latest(subject_of(cfg.kafka.topic))

    source.faults(unique_id, set_fields={"bonus": 5})
    source.append(unique_id, 100)
    assert run_dag(cfg, REF) == "success"

    second = registry().latest(subject_of(cfg.kafka.topic))
    assert first is not None and second is not None and second.version == first.version + 1
    read = framed_values(kafka_bootstrap, cfg.kafka.topic)
    by_id: dict[int, list[dict[str, Any]]] = {}
    for _, schema_id, record in read:
        by_id.setdefault(schema_id, []).append(record)
    assert sorted(by_id) == sorted([first.id, second.id])
    assert len(by_id[first.id]) == 200 and "bonus" not in by_id[first.id][0]
    assert len(by_id[second.id]) == 100 and all(record["bonus"] == 5 for record in by_id[second.id])


def test_discard_row_dead_letters_retyped_records_naming_the_field(source, kafka_bootstrap, unique_id, run_dag, pg_uri):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(
        unique_id,
        kafka={"value_format": "json_schema", "contract": "discard_row", "dead_letter_topic": f"test.{unique_id}.dlq"},
    )
    assert run_dag(cfg, REF) == "success"

    source.faults(unique_id, set_fields={"salary": 12000})
    source.append(unique_id, 100)
    assert run_dag(cfg, REF) == "success"

    assert len(read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes)) == 200
    dead = read_topic(kafka_bootstrap, f"test.{unique_id}.dlq")
    assert len(dead) == 100
    assert all("Expected `str | null`, got `int` - at `$.salary`" in m.value["reason"] for m in dead), dead[0]
    run = run_record(pg_uri, unique_id)
    assert run["dead_lettered"] == 100 and run["status"] == "success"
    assert any("are dead-lettered" in note for note in run["notes"]), run["notes"]


def java_avro(bootstrap: str, topic: str) -> list[tuple[int, int, str, int, dict[str, Any]]]:
    """(partition, timestamp, key, schema id, record) of every message as a JVM consumer decodes it with Apache Avro
    and the schema its id names in the registry (tests/integration/java/JavaAvro.java)."""
    program = REPO / "tests" / "integration" / "java" / "JavaAvro.java"
    classpath = f"{REPO / 'dev' / 'kafka' / 'lib' / '*'}:{REPO / 'dev' / 'registry' / 'target' / 'registry-runner.jar'}"
    done = subprocess.run(
        ["java", "-cp", classpath, str(program), bootstrap, topic, os.environ["CRAWLER_OPS_REGISTRY_URL"]],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = []
    for line in done.stdout.splitlines():
        partition, stamp, key, schema_id, text = line.split("\t", 4)
        rows.append((int(partition), int(stamp), bytes.fromhex(key).decode(), int(schema_id), json.loads(text)))
    return rows


def test_a_jvm_consumer_decodes_every_avro_value_with_the_schema_its_id_names(
    source, kafka_bootstrap, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=0.8)
    cfg = make_task(unique_id, kafka={"value_format": "avro", "delivery": "exactly_once"})
    assert run_dag(cfg, REF) == "success"

    latest = registry().latest(subject_of(cfg.kafka.topic))
    assert latest is not None
    names = {field["name"]: json_name(field) for field in latest.schema["fields"]}
    truth = {r["id"]: r for r in source.records(unique_id, 0, 300)}
    python_view = {
        m.key: (m.partition, m.timestamp) for m in read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes)
    }
    java = java_avro(kafka_bootstrap, cfg.kafka.topic)
    assert len(java) == len(python_view) > 200
    for partition, stamp, key, schema_id, record in java:
        assert schema_id == latest.id
        assert (partition, stamp) == python_view[key]
        decoded = {names[name]: value for name, value in record.items()}
        assert decoded == as_sent(truth[key], set(decoded)), key


def test_a_given_schema_that_cannot_read_the_old_values_fails_the_plan_naming_the_field(
    source, kafka_bootstrap, unique_id, run_dag, pg_uri, tmp_path
):
    """The registry's default level accepts anything (NONE on Apicurio): crawler_ops checks BACKWARD itself."""
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    first = avro_schema(source.records(unique_id, 0, 200), unique_id, loose=True)
    path = tmp_path / "value.avsc"
    path.write_text(json.dumps(first), encoding="utf-8")
    cfg = make_task(unique_id, kafka={"value_format": "avro", "value_schema": str(path)})
    assert run_dag(cfg, REF) == "success"
    published = len(read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes))

    fields = [{**f, "type": ["null", "long"]} if f["name"] == "salary" else f for f in first["fields"]]
    retyped = {**first, "fields": fields}
    source.append(unique_id, 50)
    assert run_dag(make_task(unique_id, kafka={"value_format": "avro", "value_schema": retyped}), REF) == "failed"

    error = " ".join(run_record(pg_uri, unique_id)["errors"])
    assert "salary was string and is now null or long, which cannot hold an old string value" in error, error
    assert registry().latest(subject_of(cfg.kafka.topic)).version == 1  # type: ignore[union-attr]
    assert len(read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes)) == published


@pytest.mark.parametrize("value_format", ["json_schema", "avro"])
def test_a_chunk_meeting_a_record_its_plan_did_not_see_evolves_the_subject_under_evolve(
    source, unique_id, run_dag, value_format
):
    """The plan checks the newest page only: an older page's record with a new field is met by a chunk, which under
    evolve registers a widened version and frames the page with it."""
    source.create(unique_id, total=100, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"value_format": value_format, "contract": "evolve"})
    assert run_dag(cfg, REF) == "success"
    first = registry().latest(subject_of(cfg.kafka.topic))
    assert first is not None

    page = [{**record, "bonus": [1, 2]} for record in source.records(unique_id, 0, 2)]
    batch_filter = BatchFilter(RunContext(cfg, "evolve-in-chunk", REF, RunParams()), False, first.id)
    filtered = batch_filter.filter(Batch(0, 2), page)

    second = registry().latest(subject_of(cfg.kafka.topic))
    assert second is not None and second.version == first.version + 1
    assert filtered.dead_letters == () and len(filtered.messages) == 2
    assert {unframed(bytes(m.value))[0] for m in filtered.messages} == {second.id}


def test_a_dry_run_registers_nothing_and_checks_against_the_latest_version(source, unique_id, run_dag, pg_uri):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"value_format": "avro", "contract": "evolve"})
    assert run_dag(cfg, REF, {"dry_run": True}) == "success"
    assert registry().latest(subject_of(cfg.kafka.topic)) is None, "a dry run registered a schema"

    assert run_dag(cfg, REF) == "success"
    source.faults(unique_id, set_fields={"bonus": 5})
    source.append(unique_id, 100)
    assert run_dag(cfg, REF, {"dry_run": True}) == "success"
    assert registry().latest(subject_of(cfg.kafka.topic)).version == 1  # type: ignore[union-attr]
    assert watermark(pg_uri, unique_id) == 200


def test_a_registry_that_does_not_answer_fails_the_plan_naming_the_connection(
    source, kafka_bootstrap, unique_id, run_dag, pg_uri, monkeypatch
):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_REGISTRY_DOWN", json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{port}"})
    )
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"value_format": "avro", "registry_conn_id": "registry_down"})

    assert run_dag(cfg, REF) == "failed"

    error = " ".join(run_record(pg_uri, unique_id)["errors"])
    assert "schema registry (connection 'registry_down')" in error and "ConnectError" in error, error
    assert watermark(pg_uri, unique_id) is None
    assert read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes) == []
