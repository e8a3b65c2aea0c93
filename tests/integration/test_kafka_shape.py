"""What a consumer sees of each message, read back from the real broker, also by kafka-clients' own KafkaConsumer: the
timestamp (the record's date, or the produce time), the key, the headers, the compression; and the topic settings a
task gives its topic, checked before anything is produced."""

from __future__ import annotations

import json
import struct
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from crawler_ops.message.filtering import DateRule, record_date
from crawler_ops.message.shaping import epoch_ms
from tests.support import REPO, make_task, query, read_topic, routed_topics, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
RULE = DateRule()
DAY_MS = 86_400_000


def record_ms(value: dict) -> int:
    moment, _ = record_date(value, RULE.fields, RULE.tz)
    assert moment is not None
    return epoch_ms(moment, RULE.tz)


def java_view(bootstrap: str, topic: str) -> dict[tuple[int, str], tuple[str, int, dict[str, str]]]:
    """(partition, key) -> (timestamp type, timestamp, headers) as kafka-clients' KafkaConsumer reads them
    (tests/integration/java/JavaShape.java)."""
    program = REPO / "tests" / "integration" / "java" / "JavaShape.java"
    done = subprocess.run(
        ["java", "-cp", str(REPO / "dev" / "kafka" / "lib" / "*"), str(program), bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    view = {}
    for line in done.stdout.splitlines():
        partition, _offset, kind, stamp, key, *headers = line.split("\t")
        pairs = (h.split("=", 1) for h in headers)
        view[(int(partition), bytes.fromhex(key).decode())] = (
            kind,
            int(stamp),
            {name: bytes.fromhex(value).decode() for name, value in pairs},
        )
    return view


def topic_settings(bootstrap: str, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()}


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_a_jvm_consumer_sees_the_record_date_the_composite_key_and_the_templated_headers(
    source, kafka_bootstrap, unique_id, run_dag, delivery
):
    source.create(unique_id, total=300, ref=REF, in_window_share=0.6)
    cfg = make_task(
        unique_id,
        kafka={
            "key_template": "{company}/{id}",
            "headers": {"company": "{company}", "origin": "{run.task}@{run.offset}"},
            "delivery": delivery,
        },
    )

    assert run_dag(cfg, REF) == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert 100 < len(messages) < 300, "the window kept some records and expired others"
    java = java_view(kafka_bootstrap, cfg.kafka.topic)
    assert len(java) == len(messages)
    for m in messages:
        assert m.key == f"{m.value['company']}/{m.value['id']}"
        assert m.timestamp_type == TIMESTAMP_CREATE_TIME and m.timestamp == record_ms(m.value)
        assert m.headers["company"] == m.value["company"]
        assert m.headers["origin"] == f"{unique_id}@{m.headers['source_offset']}"
        assert java[(m.partition, m.key)] == ("CreateTime", m.timestamp, m.headers)
    assert len({m.timestamp for m in messages}) > len(messages) // 2, "dates differ: the comparison means something"


def test_produce_time_stamps_each_message_when_it_is_sent(source, kafka_bootstrap, unique_id, run_dag):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"timestamp": "produce_time"})
    before = int(time.time() * 1000)

    assert run_dag(cfg, REF) == "success"

    after = int(time.time() * 1000)
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert len(messages) == 200
    assert all(before <= m.timestamp <= after for m in messages)
    assert all(m.timestamp - record_ms(m.value) > DAY_MS for m in messages), "not the records' dates"


def test_a_created_topic_gets_the_task_settings_and_the_chosen_compression(
    source, kafka_bootstrap, unique_id, run_dag, kafka_data_dir
):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(
        unique_id,
        kafka={"compression": "zstd", "topic_config": {"retention.ms": -1, "max.message.bytes": 2_000_000}},
    )

    assert run_dag(cfg, REF) == "success"

    settings = topic_settings(kafka_bootstrap, cfg.kafka.topic)
    assert settings["retention.ms"] == "-1" and settings["max.message.bytes"] == "2000000"
    assert len(read_topic(kafka_bootstrap, cfg.kafka.topic)) == 200
    codecs = segment_codecs(kafka_data_dir, cfg.kafka.topic)
    assert codecs == {"zstd"}, codecs


CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def segment_codecs(data_dir: Path, topic: str) -> set[str]:
    """The compression codec of every record batch in the topic's log segments on the broker's disk, read from each
    batch's header (Kafka's record batch format v2: base offset int64, length int32, leader epoch int32, magic int8,
    crc int32, then attributes int16 whose low three bits are the codec)."""
    files = sorted(data_dir.glob(f"{topic}-*/*.log"))
    assert files, f"no log segment of {topic} under {data_dir}"
    codecs = set()
    for file in files:
        data = file.read_bytes()
        at = 0
        while at + 12 <= len(data):
            (length,) = struct.unpack_from(">i", data, at + 8)
            if length <= 0:
                break
            magic, _crc, attributes = struct.unpack_from(">bIh", data, at + 16)
            assert magic == 2, f"{file}: record batch format {magic}"
            codecs.add(CODECS[attributes & 0x07])
            at += 12 + length
    return codecs


def test_a_topic_whose_settings_differ_fails_the_plan_naming_each_and_produces_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"timestamp": "produce_time"})
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(cfg.kafka.topic, 2, 1, config={"cleanup.policy": "delete"})])[cfg.kafka.topic].result(
        30
    )
    drifted = make_task(unique_id, kafka={"timestamp": "produce_time", "topic_config": {"cleanup.policy": "compact"}})

    assert run_dag(drifted, REF) == "failed"

    errors = json.dumps(run_record(pg_uri, unique_id)["errors"])
    assert "differs from kafka.topic_config: cleanup.policy: the task says compact, the topic has delete" in errors
    assert f"--entity-name {cfg.kafka.topic} --add-config cleanup.policy=compact" in errors
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []
    assert watermark(pg_uri, unique_id) is None


def test_a_retention_shorter_than_the_window_fails_the_plan_under_record_dates_only(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    short = {"retention.ms": 3 * DAY_MS}
    cfg = make_task(unique_id, kafka={"topic_config": short}, filter={"days": 7})

    assert run_dag(cfg, REF) == "failed"

    errors = json.dumps(run_record(pg_uri, unique_id)["errors"])
    assert "retention.ms is 259200000 (3.0 days), shorter than filter.days (7)" in errors
    assert "set kafka.timestamp: produce_time" in errors
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []

    produced = make_task(unique_id, kafka={"topic_config": short, "timestamp": "produce_time"}, filter={"days": 7})
    assert run_dag(produced, REF) == "success"
    assert len(read_topic(kafka_bootstrap, cfg.kafka.topic)) == 200


def read_routed(bootstrap: str, prefix: str, isolation: str = "read_committed") -> dict[str, list]:
    return {topic: read_topic(bootstrap, topic, isolation=isolation) for topic in routed_topics(bootstrap, prefix)}


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_a_topic_template_routes_each_record_once_to_its_city_topic_created_with_the_task_settings(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag, delivery
):
    source.create(unique_id, total=600, ref=REF, in_window_share=0.5, city_codes=True)
    prefix = f"test.{unique_id}.city."
    cfg = make_task(
        unique_id,
        kafka={"topic_template": prefix + "{city_code}", "delivery": delivery, "topic_config": {"retention.ms": -1}},
    )

    assert run_dag(cfg, REF) == "success"

    truth = set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])
    routed = read_routed(kafka_bootstrap, prefix)
    assert len(routed) > 8, "records of many cities: many topics"
    seen = [m.value["id"] for messages in routed.values() for m in messages]
    assert sorted(seen) == sorted(truth), "each kept record once, on one topic"
    for topic, messages in routed.items():
        assert {prefix + m.value["city_code"] for m in messages} == {topic}
        assert topic_settings(kafka_bootstrap, topic)["retention.ms"] == "-1"
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == [], "every record had a city: none on the task topic"
    assert run_record(pg_uri, unique_id)["published"] == len(truth)


def test_a_topic_template_creates_at_most_max_new_topics_and_routes_only_to_routed_topics(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0, city_codes=True)
    prefix = f"test.{unique_id}.city."
    capped = make_task(
        unique_id,
        batch_size=300,
        kafka={"topic_template": prefix + "{city_code}", "max_new_topics": 2},
    )

    assert run_dag(capped, REF) == "failed"

    assert len(routed_topics(kafka_bootstrap, prefix)) == 2, "a source naming many cities made two topics"
    errors = " ".join(run_record(pg_uri, unique_id)["errors"])
    assert "kafka.max_new_topics (2)" in errors and f"Kafka topic '{prefix}" in errors
    assert all(m == [] for m in read_routed(kafka_bootstrap, prefix, "read_uncommitted").values()), "none produced"

    # Routed only where the config allows: the two topics made, by pattern; every other city dead-lettered.
    made = sorted(routed_topics(kafka_bootstrap, prefix))
    allowed = make_task(unique_id, kafka={"topic_template": prefix + "{city_code}", "routed_topics": made})
    assert run_dag(allowed, REF, {"reset": True}) == "success"
    routed = read_routed(kafka_bootstrap, prefix)
    dead = query(pg_uri, "SELECT reason FROM crawler_ops.crawl_error WHERE kind = 'record' AND task_id = %s", unique_id)
    assert sorted(routed) == made and sum(len(m) for m in routed.values()) + len(dead) == 300
    assert dead and all("not one of kafka.routed_topics" in reason for (reason,) in dead)
