"""The topics as Confluent's own client reads them: ``confluent_kafka.schema_registry``'s ``AvroDeserializer`` and
``JSONDeserializer`` with its ``SchemaRegistryClient``, against the dev stack's registry, read every value back field
for field as the source sent it: nulls, Chinese text and field names, nested objects and lists, records written
before and after a compatible evolution, and records routed to topics of their own (each with its own subject)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from crawler_ops.message.values import json_name, unframed
from tests.support import make_task, read_topic, run_record

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
LATER = REF + timedelta(hours=6)
FORMATS = ["avro", "json_schema"]
#: Fields every record gets on top of the demo's own: a null, a nested object with a list, a Chinese field name.
EXTRA = {"bonus": None, "meta": {"level": 3, "tags": ["远程", "remote"], "score": 4.5}, "城市代码": "北京-BJ"}


def registry_client() -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": os.environ["CRAWLER_OPS_REGISTRY_URL"]})


def confluent_reader(value_format: str, client: SchemaRegistryClient) -> Callable[[bytes, str], Any]:
    """What a consumer configures: the deserializer of the format, with the registry client (the writer's schema is
    fetched by the id each value carries)."""
    if value_format == "avro":
        deserializer: Any = AvroDeserializer(client)
    else:
        deserializer = JSONDeserializer(None, schema_registry_client=client)
    return lambda value, topic: deserializer(value, SerializationContext(topic, MessageField.VALUE))


def read_back(bootstrap: str, topic: str, value_format: str) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """(key, headers, value) of every message of ``topic``, each value read by Confluent's deserializer; Avro field
    names the source had and Avro does not allow are mapped back from the writer's schema, as the field's doc says."""
    client = registry_client()
    read = confluent_reader(value_format, client)
    out = []
    for message in read_topic(bootstrap, topic, decode=bytes):
        value = read(message.value, topic)
        if value_format == "avro":
            schema_id, _ = unframed(message.value)
            fields = client.get_schema(schema_id).schema_str
            names = {f["name"]: json_name(f) for f in json.loads(fields)["fields"]}
            value = {names[name]: item for name, item in value.items()}
        out.append((message.key, message.headers, value))
    return out


def expected(record: dict[str, Any], read: dict[str, Any], value_format: str) -> dict[str, Any]:
    """The record as the format holds it: Avro has every field of its schema (null where the record has none)."""
    return {name: record.get(name) for name in read} if value_format == "avro" else record


@pytest.mark.parametrize("value_format", FORMATS)
def test_confluents_deserializers_read_every_value_as_the_source_sent_it_before_and_after_an_evolution(
    value_format, source, kafka_bootstrap, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0, append_step_s=60)
    source.faults(unique_id, set_fields=EXTRA)
    first = {r["id"]: r for r in source.records(unique_id, 0, 300)}
    cfg = make_task(unique_id, kafka={"value_format": value_format, "contract": "evolve"})
    assert run_dag(cfg, REF) == "success"

    source.faults(unique_id, set_fields={**EXTRA, "remote": True})  # a new field: a compatible, widened version
    source.append(unique_id, 100)
    later = {r["id"]: r for r in source.records(unique_id, 300, 100)}
    assert run_dag(cfg, LATER) == "success"

    read = read_back(kafka_bootstrap, cfg.kafka.topic, value_format)
    runs = sorted({headers["run_id"] for _, headers, _ in read})
    assert len(runs) == 2 and len(read) == 400
    for key, headers, value in read:
        record = first[key] if headers["run_id"] == runs[0] else later[key]
        assert value == expected(record, value, value_format), key
        assert set(record) <= set(value), "every field the source sent"
    ids = {unframed(m.value)[0] for m in read_topic(kafka_bootstrap, cfg.kafka.topic, decode=bytes)}
    versions = registry_client().get_versions(f"{cfg.kafka.topic}-value")
    assert len(ids) == 2 and len(versions) == 2, "the values written before and after name their own version"


@pytest.mark.parametrize("value_format", FORMATS)
def test_each_routed_topic_has_its_subject_and_confluents_deserializer_reads_it(
    value_format, source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=400, ref=REF, in_window_share=1.0, city_codes=True)
    truth = {r["id"]: r for r in source.records(unique_id, 0, 400)}
    prefix = f"test.{unique_id}.city."
    cfg = make_task(unique_id, kafka={"value_format": value_format, "topic_template": prefix + "{city_code}"})

    assert run_dag(cfg, REF) == "success"

    client = registry_client()
    topics = sorted({prefix + r["city_code"] for r in truth.values()})
    assert len(topics) > 5
    main = client.get_latest_version(f"{cfg.kafka.topic}-value")
    seen = []
    for topic in topics:
        subject = client.get_latest_version(f"{topic}-value")
        assert subject.schema.schema_str == main.schema.schema_str, f"{topic}: the run's schema under its own subject"
        for key, _, value in read_back(kafka_bootstrap, topic, value_format):
            assert value == expected(truth[key], value, value_format) and topic == prefix + value["city_code"]
            seen.append(key)
    assert sorted(seen) == sorted(truth), "every record once, each on its city's topic"
    assert run_record(pg_uri, unique_id)["published"] == 400


@pytest.mark.parametrize("value_format", FORMATS)
def test_a_feed_publishes_a_registry_format_that_confluents_deserializer_reads(
    value_format, source, kafka_bootstrap, unique_id, run_dag
):
    from tests.integration.test_source_feeds import feed_task

    source.create(unique_id, total=350, ref=REF, in_window_share=1.0, append_step_s=60, feed={"next": "cursor"})
    source.faults(unique_id, set_fields=EXTRA)
    truth = {r["id"]: r for r in source.records(unique_id, 0, 350)}
    cfg = feed_task(unique_id, "cursor", kafka={"value_format": value_format})
    assert run_dag(cfg, REF) == "success"
    source.append(unique_id, 50)
    truth |= {r["id"]: r for r in source.records(unique_id, 350, 50)}
    assert run_dag(cfg, LATER) == "success"

    read = read_back(kafka_bootstrap, cfg.kafka.topic, value_format)
    assert sorted(key for key, _, _ in read) == sorted(truth), "every record of the feed once"
    for key, _, value in read:
        assert value == expected(truth[key], value, value_format), key
    assert len(registry_client().get_versions(f"{cfg.kafka.topic}-value")) == 1, "settled on the first page"
