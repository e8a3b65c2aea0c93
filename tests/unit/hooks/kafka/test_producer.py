"""Unit tests of crawler_ops.hooks.kafka.producer: the producer's settings, and a publisher that returns only when Kafka
confirmed every message (a fake producer stands in for librdkafka)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from crawler_ops.errors import DeliveryError
from crawler_ops.hooks.kafka import producer as producer_module
from crawler_ops.hooks.kafka.producer import (
    IdempotentProducerHook,
    KafkaPublisher,
    ReportingProducer,
    failure_collector,
    new_topic_settings,
    task_settings,
    warn_single_replica,
)
from crawler_ops.message.records import Message
from crawler_ops.planning import Batch
from crawler_ops.results import RunCounts


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The configs the hook builds librdkafka producers with (no producer is created)."""
    configs: list[dict[str, Any]] = []
    monkeypatch.setattr(producer_module, "ReportingProducer", lambda config: configs.append(config) or object())
    return configs


@pytest.fixture
def kafka_conn(airflow_connection: Callable[..., None]) -> Callable[..., None]:
    """Define the Kafka connection ``kafka_x`` with these librdkafka settings in its extra."""
    return lambda **extra: airflow_connection(
        "kafka_x", conn_type="kafka", extra={"bootstrap.servers": "127.0.0.1:9", **extra}
    )


def test_idempotence_and_acks_all_are_forced_over_the_connection_extra(kafka_conn, made):
    forced = {"enable.idempotence": False, "acks": "1", "delivery.report.only.error": False}
    kafka_conn(**forced, **{"linger.ms": 50, "compression.type": "zstd"})

    IdempotentProducerHook("kafka_x").get_producer()

    (config,) = made
    assert (config["enable.idempotence"], config["acks"]) == (True, "all")
    assert config["delivery.report.only.error"] is True, "a batch's success is read from the flush, not per message"
    assert (config["linger.ms"], config["compression.type"]) == (50, "zstd"), "other settings: the extra wins"
    assert config["message.timeout.ms"] == 60_000 and config["bootstrap.servers"] == "127.0.0.1:9"


def test_without_extra_settings_the_producer_gets_the_defaults(kafka_conn, made):
    kafka_conn()

    IdempotentProducerHook("kafka_x").get_producer()

    (config,) = made
    assert {k: config[k] for k in ("enable.idempotence", "acks", "linger.ms", "compression.type")} == {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
    }


@dataclass
class FakeProducer:
    """Accepts messages, reports each delivery on flush with the next outcome of ``reports`` (None = delivered; with
    ``only_errors``, as librdkafka under delivery.report.only.error, a delivered message gets no report)."""

    reports: list[Any] = field(default_factory=list)
    only_errors: bool = False
    fails: Exception | None = None  # what produce() raises
    headers: list[Any] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    full_after: int | None = None  # raise BufferError once this many messages wait, until poll() is called
    remaining: int = 0
    produced: list[tuple[str, bytes]] = field(default_factory=list)
    waiting: list[Callable[[Any, Any], None]] = field(default_factory=list)
    polls: int = 0

    failures: list[str] = field(default_factory=list)

    def produce(  # the order of confluent-kafka's positional arguments
        self,
        topic: str,
        value: bytes,
        key: bytes,
        partition: int,
        on_delivery: None,
        callback: None,
        timestamp: int,
        headers: Any,
    ) -> None:
        assert partition == -1 and on_delivery is None and callback is None, "the producer's own callback reports"
        if self.fails is not None:
            raise self.fails
        if self.full_after is not None and len(self.waiting) >= self.full_after:
            raise BufferError("Local: Queue full")
        self.produced.append((topic, key))
        self.headers.append(headers)
        self.timestamps.append(timestamp)
        report = failure_collector(self.failures)
        self.waiting.append(lambda err, _msg, topic=topic: report(err, SimpleNamespace(topic=lambda: topic)))

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        return self._serve()

    def flush(self, _timeout: float) -> int:
        self._serve()
        return self.remaining

    def _serve(self) -> int:
        served, self.waiting = self.waiting, []
        for callback in served:
            outcome = self.reports.pop(0) if self.reports else None
            if outcome is not None or not self.only_errors:
                callback(outcome, None)
        return len(served)


def messages(n: int, topic: str | None = None) -> list[Message]:
    return [Message(f"k{i}".encode(), b"{}", [("i", str(i).encode())], topic) for i in range(n)]


BATCH = Batch(0, 100)


def test_confirm_returns_once_every_message_is_reported_delivered_counting_those_to_the_topic():
    producer = FakeProducer()
    publisher = KafkaPublisher(producer, "jobs", "t1")  # type: ignore[arg-type]

    publisher.send(BATCH, messages(3) + messages(1, topic="jobs.dead"), RunCounts())

    assert publisher.confirm() == 3, "dead letters are delivered too, but not counted as published"
    assert [topic for topic, _ in producer.produced] == ["jobs", "jobs", "jobs", "jobs.dead"]
    assert producer.headers == [[("i", b"0")], [("i", b"1")], [("i", b"2")], [("i", b"0")]], "each message's headers"


def test_a_publisher_that_sent_nothing_confirms_nothing():
    assert KafkaPublisher(FakeProducer(remaining=1), "jobs", "t1").confirm() == 0  # type: ignore[arg-type]


def test_a_failed_delivery_report_fails_the_batch_naming_topics_and_offsets():
    publisher = KafkaPublisher(FakeProducer(reports=[None, "Broker: Message size too large"]), "jobs", "t1")  # type: ignore[arg-type]

    publisher.send(BATCH, messages(2) + messages(1, topic="jobs.dead"), RunCounts())

    expected = r"task t1: Kafka confirmed 2 of 3 messages to 'jobs' and 'jobs.dead' \(offsets \[0, 100\)\)"
    with pytest.raises(DeliveryError, match=expected + ".*Message size too large") as failed:
        publisher.confirm()
    assert str(failed.value).endswith(
        ": Broker: Message size too large. The batch stays not done and is retried; check the broker and the topic."
    )


def test_a_failed_batch_names_its_first_three_distinct_errors():
    reports = ["e4", "e2", None, "e1", "e3", "e2"]
    publisher = KafkaPublisher(FakeProducer(reports=reports), "jobs", "t1")  # type: ignore[arg-type]

    publisher.send(BATCH, messages(6), RunCounts())

    with pytest.raises(DeliveryError, match=r"confirmed 1 of 6 messages .*: e1; e2; e3\. The batch stays"):
        publisher.confirm()


def test_delivered_messages_need_no_report_of_their_own_and_a_failure_among_them_still_fails_the_batch():
    quiet = FakeProducer(only_errors=True)
    publisher = KafkaPublisher(quiet, "jobs", "t1")  # type: ignore[arg-type]
    publisher.send(BATCH, messages(3) + messages(2, topic="jobs.dead"), RunCounts())
    assert publisher.confirm() == 3, "the records among the messages, all delivered: none was reported failed"

    failing = KafkaPublisher(FakeProducer(reports=[None, None, "e1"], only_errors=True), "jobs", "t1")  # type: ignore[arg-type]
    failing.send(BATCH, messages(3), RunCounts())
    with pytest.raises(DeliveryError, match=r"confirmed 2 of 3 messages .*: e1\. The batch stays"):
        failing.confirm()


def test_a_message_librdkafka_refuses_fails_the_batch_naming_the_topic():
    refused = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"))
    publisher = KafkaPublisher(FakeProducer(fails=refused), "jobs", "t1")  # type: ignore[arg-type]

    with pytest.raises(DeliveryError, match=r"^task t1: cannot produce to 'jobs': .*Message size too large"):
        publisher.send(BATCH, messages(1), RunCounts())


def test_messages_still_queued_after_the_flush_timeout_fail_the_batch():
    publisher = KafkaPublisher(FakeProducer(remaining=1), "jobs", "t1", flush_timeout=3)  # type: ignore[arg-type]

    publisher.send(BATCH, messages(2), RunCounts())

    with pytest.raises(DeliveryError, match=r"confirmed 1 of 2 messages .* within 3s: no delivery report"):
        publisher.confirm()


def test_a_full_local_queue_is_drained_and_every_message_still_produced():
    producer = FakeProducer(full_after=2)
    publisher = KafkaPublisher(producer, "jobs", "t1")  # type: ignore[arg-type]

    publisher.send(BATCH, messages(5), RunCounts())

    assert publisher.confirm() == 5
    assert [key for _, key in producer.produced] == [f"k{i}".encode() for i in range(5)] and producer.polls == 2


@pytest.mark.parametrize(
    ("replication", "brokers", "config", "expected"),
    [
        (None, 1, None, (1, {"min.insync.replicas": "1"})),
        (None, 2, None, (2, {"min.insync.replicas": "1"})),
        (None, 3, None, (3, {"min.insync.replicas": "2"})),
        (None, 5, None, (3, {"min.insync.replicas": "2"})),
        (None, 0, None, (1, {"min.insync.replicas": "1"})),
        (4, 5, None, (4, {"min.insync.replicas": "3"})),
        (2, 5, {"cleanup.policy": "compact"}, (2, {"min.insync.replicas": "1", "cleanup.policy": "compact"})),
        (3, 3, {"min.insync.replicas": "3"}, (3, {"min.insync.replicas": "3"})),
    ],
)
def test_a_created_topic_has_min_3_brokers_replicas_and_one_fewer_in_sync_unless_configured(
    replication, brokers, config, expected
):
    assert new_topic_settings(replication, brokers, config) == expected


def test_a_single_replica_topic_is_a_warning_naming_the_task_topic_and_the_setting(caplog):
    caplog.set_level("WARNING", logger=producer_module.__name__)
    warn_single_replica("t1", "jobs", 2)
    warn_single_replica("t1", "jobs", 0)
    assert caplog.messages == []
    warn_single_replica("t1", "jobs", 1)
    assert caplog.messages == [
        "task t1: Kafka topic 'jobs' has a single replica: acks=all waits for one broker, and losing it loses the "
        "topic; on a cluster, set kafka.replication_factor (default min(3, brokers)) or add replicas"
    ]


def test_routed_records_count_as_published_and_each_new_route_is_prepared_once_before_it_is_produced():
    producer = FakeProducer()
    prepared: list[set[str]] = []

    def prepare(topics: set[str]) -> None:
        assert producer.produced == [] or prepared, "a topic is prepared before the first message is produced"
        prepared.append(set(topics))

    publisher = KafkaPublisher(producer, "jobs", "t1", prepare=prepare)  # type: ignore[arg-type]
    routed = [Message(b"a", b"{}", [], "jobs.bj", routed=True), Message(b"b", b"{}", [], "jobs.sh", routed=True)]
    publisher.send(BATCH, [*routed, *messages(1), *messages(1, topic="jobs.dead")], RunCounts())
    assert publisher.confirm() == 3, "routed and task-topic records count; the dead letter does not"
    publisher.send(BATCH, [routed[0], Message(b"c", b"{}", [], "jobs.gz", routed=True)], RunCounts())
    assert publisher.confirm() == 2
    publisher.send(BATCH, [routed[1]], RunCounts())
    assert publisher.confirm() == 1
    assert prepared == [{"jobs.bj", "jobs.sh"}, {"jobs.gz"}], "a route met two batches ago is not prepared again"


def test_a_task_s_partitioner_and_compression_are_its_producer_s_settings_and_unset_ones_are_left_out():
    from crawler_ops.config.kafka import KafkaConfig

    assert task_settings(KafkaConfig(topic="t")) == {}
    assert task_settings(KafkaConfig(topic="t", partitioner="murmur2", compression="zstd")) == {
        "partitioner": "murmur2",
        "compression.type": "zstd",
    }


def test_each_message_is_produced_with_its_timestamp():
    producer = FakeProducer()
    publisher = KafkaPublisher(producer, "jobs", "t1")  # type: ignore[arg-type]
    dated = [Message(b"a", b"{}", [], None, 1795046400000), Message(b"b", b"{}", [], None, 0)]

    publisher.send(BATCH, dated, RunCounts())

    assert publisher.confirm() == 2 and producer.timestamps == [1795046400000, 0]


def test_a_reporting_producer_collects_each_failed_delivery_without_a_callback_per_message():
    """A real librdkafka producer, its broker unreachable: the message times out, and the report reaches the
    producer's own failures, which the publisher reads."""
    producer = ReportingProducer({"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 200, "log_level": 0})
    publisher = KafkaPublisher(producer, "jobs", "t1", flush_timeout=10)
    publisher.send(BATCH, messages(1), RunCounts())
    with pytest.raises(DeliveryError, match=r"^task t1: Kafka confirmed 0 of 1 messages to 'jobs' .*timed out"):
        publisher.confirm()
    assert len(producer.failures) == 1
