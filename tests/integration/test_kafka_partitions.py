"""Where a key lands: on the partition the Java producer puts it, so a topic joins by key with one written from
the JVM (Kafka Streams, ksqlDB, Flink)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from tests.support import REPO, make_task, read_topic

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
PARTITIONS = 7


def java_partitions(keys: list[str], partitions: int) -> list[int]:
    """The partition kafka-clients' producer gives each key (tests/integration/java/JavaPartitions.java)."""
    program = REPO / "tests" / "integration" / "java" / "JavaPartitions.java"
    done = subprocess.run(
        ["java", "-cp", str(REPO / "dev" / "kafka" / "lib" / "*"), str(program), str(partitions)],
        input="".join(f"{key.encode().hex()}\n" for key in keys),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [int(line) for line in done.stdout.split()]


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_a_key_lands_on_the_partition_the_java_producer_puts_it(source, kafka_bootstrap, unique_id, run_dag, delivery):
    source.create(unique_id, total=700, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"partitions": PARTITIONS, "delivery": delivery})

    assert run_dag(cfg, REF) == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert len(messages) == 700
    expected = java_partitions([m.key for m in messages], PARTITIONS)
    assert [m.partition for m in messages] == expected
    assert len(set(expected)) == PARTITIONS, "keys spread over every partition: the comparison means something"


def test_a_task_may_choose_another_partitioner(source, kafka_bootstrap, unique_id, run_dag):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"partitions": PARTITIONS, "partitioner": "consistent"})

    assert run_dag(cfg, REF) == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    java = java_partitions([m.key for m in messages], PARTITIONS)
    moved = sum(m.partition != p for m, p in zip(messages, java, strict=True))
    assert moved > len(messages) // 2, "librdkafka's CRC32 hash places most keys elsewhere than Java's murmur2"
