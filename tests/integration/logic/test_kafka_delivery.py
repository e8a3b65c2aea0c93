"""Kafka delivery on the stack's broker: topics made as configured (crawler_ops.hooks.kafka.producer), batches produced
in transactions with their markers, and the markers read back (crawler_ops.hooks.kafka.exactly_once): a marker counts
only for the batch row it was written for, so a reset publishes again."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from crawler_ops.errors import DeliveryError
from crawler_ops.hooks.kafka import producer as producer_module
from crawler_ops.hooks.kafka.exactly_once import (
    MARKER_TOPIC_CONFIG,
    MarkerLog,
    TransactionalPublisher,
    transactional_id,
)
from crawler_ops.hooks.kafka.producer import (
    IdempotentProducerHook,
    KafkaPublisher,
    ReportingProducer,
    create_topic,
    ensure_topic,
)
from crawler_ops.message.records import Message
from crawler_ops.planning import Batch
from crawler_ops.results import RunCounts
from tests.integration.logic.conftest import KAFKA_CONN, stack_value

pytestmark = pytest.mark.integration

COUNTS = RunCounts(pages=1, fetched=2, kept=2, published=2, batches_done=1)


@pytest.fixture
def hook() -> IdempotentProducerHook:
    stack_value("CRAWLER_OPS_KAFKA_BOOTSTRAP")
    return IdempotentProducerHook(KAFKA_CONN)


@pytest.fixture
def topics(hook: IdempotentProducerHook, name: str) -> Iterator[list[str]]:
    """Topic names of this test's own (``<name>.<suffix>``), deleted afterwards."""
    made: list[str] = []
    yield made
    admin = hook.admin()
    existing = [t for t in made if t in admin.list_topics(timeout=10).topics]
    if existing:
        for future in admin.delete_topics(existing, operation_timeout=10).values():
            future.result(timeout=10)


def new_topic(hook: IdempotentProducerHook, topics: list[str], suffix: str, **config: str) -> str:
    topic = f"{uuid.uuid4().hex[:10]}.{suffix}"
    topics.append(topic)
    assert ensure_topic(hook.admin(), topic, 1, None, True, "t", config=config or None)
    return topic


def read_all(hook: IdempotentProducerHook, topic: str, isolation: str = "read_committed") -> list[Any]:
    consumer = Consumer(
        {
            **hook.client_config(),
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        found: list[tuple[bytes | None, bytes | None]] = []
        while True:
            message = consumer.poll(10)
            assert message is not None, f"no end of partition of {topic} within 10 s"
            if message.error():
                return found
            found.append((message.key(), message.value()))
    finally:
        consumer.close()


def single_replica_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m.split(": acks=all")[0] for m in caplog.messages if "has a single replica" in m]


def test_a_topic_is_created_once_with_its_config_and_a_missing_one_fails_when_creation_is_off(hook, topics, caplog):
    admin = hook.admin()
    caplog.set_level(logging.WARNING, logger=producer_module.__name__)
    topic = new_topic(hook, topics, "made", **MARKER_TOPIC_CONFIG)
    assert single_replica_warnings(caplog) == [f"task t: Kafka topic '{topic}' has a single replica"], "when created"
    caplog.clear()
    assert not ensure_topic(admin, topic, 1, None, True, "t")
    assert not ensure_topic(admin, topic, 1, None, False, "t"), "an existing topic needs no creation"
    assert single_replica_warnings(caplog) == [f"task t: Kafka topic '{topic}' has a single replica"] * 2, "existing"
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(timeout=10)
    assert config["cleanup.policy"].value == "compact"
    assert config["min.insync.replicas"].value == "1"
    with pytest.raises(DeliveryError, match=r"does not exist and kafka\.create_topic is false"):
        ensure_topic(admin, f"{topic}.absent", 1, None, False, "t")
    with pytest.raises(
        DeliveryError,
        match=r"^task t: Kafka topic '.*' is missing and could not be created \(1 partitions, replication 3\): ",
    ):
        ensure_topic(admin, f"{topic}.too_many_replicas", 1, 3, True, "t")
    assert ensure_topic(admin, topic, 1, None, True, "t") is False


def test_a_topic_gets_its_partitions_and_one_created_meanwhile_by_another_run_is_not_an_error(hook, topics, name):
    admin = hook.admin()
    topic = f"{name}.two"
    topics.append(topic)
    assert create_topic(admin, topic, 2, 1, {"min.insync.replicas": "1"}, "t", 10)
    assert not create_topic(admin, topic, 2, 1, {"min.insync.replicas": "1"}, "t", 10), "created first by another"
    assert len(admin.list_topics(topic=topic, timeout=10).topics[topic].partitions) == 2


def test_an_unreachable_broker_fails_the_topic_check_naming_the_task_and_topic():
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(DeliveryError, match=r"^task t: Kafka is unreachable while checking topic 'jobs': "):
        ensure_topic(admin, "jobs", 1, None, True, "t", timeout=1)


def test_a_publisher_returns_how_many_messages_went_to_the_task_topic(hook, topics):
    topic, dead = new_topic(hook, topics, "records"), new_topic(hook, topics, "dead")
    publisher = KafkaPublisher(hook.get_producer(), topic, "t", flush_timeout=30)
    messages = [Message(b"a", b"1", [], None), Message(b"b", b"2", [], None), Message(b"c", b"x", [], dead)]
    publisher.send(Batch(0, 3), messages, COUNTS)
    assert publisher.confirm() == 2
    publisher.send(Batch(3, 4), [], COUNTS)
    assert publisher.confirm() == 0, "an empty batch: nothing to wait for"
    assert [k for k, _ in read_all(hook, topic)] == [b"a", b"b"]
    assert [k for k, _ in read_all(hook, dead)] == [b"c"]


def markers(hook: IdempotentProducerHook, topic: str, generations: dict[int, str], run: str = "run_1") -> MarkerLog:
    return MarkerLog(hook.client_config(), topic, "t", run, generations, timeout=20)


def publisher(hook: IdempotentProducerHook, topic: str, log: MarkerLog | None, chunk: str = "0-20"):
    producer = hook.transactional_producer(f"mut.{uuid.uuid4().hex}.{chunk}")
    made = TransactionalPublisher(producer, topic, "t", log, flush_timeout=30)
    assert made.flush_timeout == 30, "the bound given, for every flush and commit"
    return made


def test_a_committed_batch_has_a_marker_for_its_row_and_an_aborted_one_has_none(hook, topics):
    topic, marker_topic = new_topic(hook, topics, "records"), new_topic(hook, topics, "markers", **MARKER_TOPIC_CONFIG)
    log = markers(hook, marker_topic, {0: "run_1", 10: "run_1"})
    sender = publisher(hook, topic, log)
    assert sender.confirm() == 0, "nothing sent: no transaction to commit"
    sender.send(Batch(0, 10), [Message(b"a", b"1", [], None)], COUNTS)
    assert sender.confirm() == 1
    sender.send(Batch(10, 20), [], COUNTS)
    assert sender.confirm() == 0, "an empty batch produces nothing"
    sender.close()
    assert sender.delivered(Batch(0, 10)) == COUNTS
    aborted = publisher(hook, topic, log)
    aborted.send(Batch(10, 20), [Message(b"b", b"2", [], None)], COUNTS)
    aborted.close()  # the open transaction is aborted
    assert read_all(hook, topic) == [(b"a", b"1")]
    assert log.delivered(Batch(10, 20)) is None, "aborted: invisible to read_committed"
    assert log.delivered(Batch(0, 10)) == COUNTS
    assert log.delivered(Batch(0, 11)) is None, "a marker of other bounds"
    assert markers(hook, marker_topic, {0: "run_2"}).delivered(Batch(0, 10)) is None, "a reset row: not delivered"
    assert markers(hook, marker_topic, {}).delivered(Batch(0, 10)) is None


def test_a_marker_tombstone_and_keyless_messages_are_not_markers(hook, topics):
    marker_topic = new_topic(hook, topics, "markers")  # not compacted: a compacted topic refuses keyless messages
    log = markers(hook, marker_topic, {0: "run_1", 10: "run_1"})
    assert json.loads(log.message(Batch(10, 20), COUNTS).value) == {
        "task": "t",
        "lo": 10,
        "hi": 20,
        "generation": "run_1",
        "run_id": "run_1",
        "counts": COUNTS.to_dict(),
    }
    raw = Producer(hook.client_config())
    for message in (log.message(Batch(0, 10), COUNTS), log.message(Batch(10, 20), COUNTS)):
        raw.produce(marker_topic, key=message.key, value=message.value)
    raw.produce(marker_topic, key=b"t:0", value=None)
    raw.produce(marker_topic, key=None, value=b"{}")
    assert raw.flush(10) == 0
    assert log.delivered(Batch(0, 10)) is None
    assert log.delivered(Batch(10, 20)) == COUNTS


def test_markers_are_read_from_every_partition_of_the_marker_topic(hook, topics, name):
    marker_topic = f"{name}.markers"
    topics.append(marker_topic)
    assert create_topic(hook.admin(), marker_topic, 2, 1, {}, "t", 10)
    log = markers(hook, marker_topic, {0: "run_1", 10: "run_1"})
    raw = Producer(hook.client_config())
    for partition, batch in ((1, Batch(10, 20)), (0, Batch(0, 10))):
        message = log.message(batch, COUNTS)
        raw.produce(marker_topic, key=message.key, value=message.value, partition=partition)
    assert raw.flush(10) == 0
    assert (log.delivered(Batch(0, 10)), log.delivered(Batch(10, 20))) == (COUNTS, COUNTS)


def test_reading_a_missing_marker_topic_fails_the_batch_before_anything_is_produced(hook, name):
    log = markers(hook, f"{name}.absent", {})
    with pytest.raises(DeliveryError, match="cannot read the marker topic"):
        log.delivered(Batch(0, 10))


@pytest.mark.parametrize("sent", ["before the fence", "after the fence"])
def test_a_newer_attempt_of_the_chunk_fences_the_earlier_one(hook, topics, sent):
    """The earlier attempt's messages reached the broker before the newer attempt started (its commit is refused), or
    are sent only after it (the broker refuses them while delivery reports are being served): either way the batch
    fails with the fencing as its cause and nothing of it is visible."""
    topic = new_topic(hook, topics, "records")
    chunk_id = f"mut.{uuid.uuid4().hex}.0-20"
    # A linger longer than the test: the message leaves only when the publisher flushes.
    lingering = IdempotentProducerHook(KAFKA_CONN, {"linger.ms": 50_000})
    old = TransactionalPublisher(lingering.transactional_producer(chunk_id), topic, "t", None, flush_timeout=30)
    old.send(Batch(0, 10), [Message(b"old", b"1", [], None)], COUNTS)
    if sent == "before the fence":
        assert old.flush() == 0
    TransactionalPublisher(hook.transactional_producer(chunk_id), topic, "t", None, flush_timeout=30)
    with pytest.raises(DeliveryError) as failed:
        old.confirm()
    fencing = failed.value.__cause__
    assert isinstance(fencing, KafkaException) and fencing.args[0].fatal(), repr(fencing)
    assert str(failed.value).startswith("task t: the Kafka transaction of offsets [0, 10) did not commit: ")
    assert str(failed.value).endswith(
        ". Nothing of it is visible to read_committed consumers; the batch stays not done and is retried (a fenced "
        "producer means a newer attempt of this chunk took over)."
    )
    old.abort()  # a fenced producer cannot abort either; that is no error
    assert old.delivered(Batch(0, 10)) is None, "without markers nothing counts as delivered"
    assert read_all(hook, topic) == []


def test_a_batch_whose_claim_was_taken_over_meanwhile_is_aborted_not_committed(hook, topics):
    topic = new_topic(hook, topics, "records")
    held = {0: True, 10: False}
    producer = hook.transactional_producer(f"mut.{uuid.uuid4().hex}.0-20")
    sender = TransactionalPublisher(producer, topic, "t", None, flush_timeout=30, holds=lambda b: held[b.lo])
    sender.send(Batch(0, 10), [Message(b"kept", b"1", [], None)], COUNTS)
    assert sender.confirm() == 1
    sender.send(Batch(10, 20), [Message(b"taken", b"2", [], None)], COUNTS)
    with pytest.raises(DeliveryError) as failed:
        sender.confirm()
    assert str(failed.value) == (
        "task t: the batch at offsets [10, 20) is no longer claimed by this worker (its lease expired and another "
        "worker took it); its Kafka transaction is aborted, so nothing of it is visible to read_committed consumers"
    )
    assert read_all(hook, topic) == [(b"kept", b"1")]


def test_transactional_ids_are_stable_per_chunk_and_per_run_for_replays():
    batches = [Batch(20, 30), Batch(0, 10)]
    assert transactional_id("t", batches) == "crawler_ops.t.0-30"
    assert transactional_id("t", batches, "manual__1") == "crawler_ops.t.manual__1.0-30"


def test_a_producer_without_the_transaction_state_log_fails_with_the_reason(hook):
    broken = ReportingProducer({"bootstrap.servers": "127.0.0.1:9", "transactional.id": "mut.none"})
    with pytest.raises(DeliveryError) as failed:
        TransactionalPublisher(broken, "x", "t", None, flush_timeout=1)
    assert str(failed.value).startswith("task t: cannot start Kafka transactions: ")
    assert str(failed.value).endswith(
        ". Nothing was claimed or published; the batches stay pending. Exactly-once delivery needs brokers with the "
        "transaction state log (Kafka 0.11+, transaction.state.log.replication.factor within the cluster) and a "
        "transaction.timeout.ms (connection extra) within the brokers' transaction.max.timeout.ms"
    )


def test_a_batch_not_confirmed_in_time_is_aborted_and_the_next_one_commits(hook, topics):
    topic = new_topic(hook, topics, "records")
    # The producer holds messages back for 30 s unless flushed: none is acknowledged before the flush, and a
    # flush that may not wait returns with the message still outstanding.
    lingering = {"linger.ms": 30_000, "message.timeout.ms": 60_000}
    settings = {**hook.client_config(), **producer_module.REQUIRED_SETTINGS, **lingering}
    producer = ReportingProducer({**settings, "transactional.id": f"mut.{uuid.uuid4().hex}.0-20"})
    sender = TransactionalPublisher(producer, topic, "t", None, flush_timeout=30)
    sender.flush_timeout = 0  # the abort that follows still gets its minimum
    sender.send(Batch(0, 10), [Message(b"late", b"1", [], None)], COUNTS)
    with pytest.raises(
        DeliveryError, match=rf"^task t: Kafka confirmed 0 of 1 messages to '{topic}' \(offsets \[0, 10\)\) "
    ):
        sender.confirm()
    sender.flush_timeout = 30
    sender.send(Batch(0, 10), [Message(b"again", b"1", [], None)], COUNTS)
    assert sender.confirm() == 1, "the first transaction was aborted, so a new one could begin"
    assert read_all(hook, topic) == [(b"again", b"1")]


def test_a_marker_read_from_an_unreachable_broker_gives_up_within_its_timeout():
    log = MarkerLog({"bootstrap.servers": "127.0.0.1:9"}, "t.markers", "t", "run_1", {}, timeout=1)
    with pytest.raises(KafkaException):
        log.delivered(Batch(0, 10))
