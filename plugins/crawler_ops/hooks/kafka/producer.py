"""Kafka side: an idempotent producer hook, topic checks, and publishers: one that confirms every delivery,
one for dry runs that publishes nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from airflow.providers.apache.kafka.hooks.produce import KafkaProducerHook
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from crawler_ops.errors import DeliveryError
from crawler_ops.message.records import Message
from crawler_ops.planning import Batch
from crawler_ops.results import RunCounts

if TYPE_CHECKING:
    from crawler_ops.config import KafkaConfig

log = logging.getLogger(__name__)
# Settings the crawl's guarantees rest on; they override the connection's extra. Delivery reports reach Python only
# for failed messages: a batch is delivered when a flush leaves nothing queued and no report said otherwise, so a
# success needs no Python call per message.
REQUIRED_SETTINGS = {"enable.idempotence": True, "acks": "all", "delivery.report.only.error": True}
# Defaults the connection's extra may override. murmur2_random puts a key on the partition the Java producer (and
# Kafka Streams, ksqlDB, Flink's Kafka sink) puts it: librdkafka's own default, consistent_random, hashes with CRC32.
DEFAULT_SETTINGS = {
    "linger.ms": 5,
    "compression.type": "lz4",
    "message.timeout.ms": 60_000,
    "partitioner": "murmur2_random",
}


def failure_collector(failures: list[str]) -> Callable[[KafkaError | None, Any], None]:
    """The delivery callback that adds the text of each failed report to ``failures``.

    It looks up no attribute when called. confluent-kafka raises a fatal error (a transactional producer fenced by a
    newer one) while it still serves delivery reports, so the callback runs with that exception pending; a method
    looked up on an object then fails with an AttributeError that replaces it. The calls left (``str``, the bound
    ``append``) are checked by CPython, which raises a SystemError caused by the pending exception instead, and
    :meth:`KafkaPublisher.flush` raises that cause."""
    append = failures.append

    def report(err: KafkaError | None, _msg: Any) -> None:
        # Only failures are reported (delivery.report.only.error); a success, were it reported, changes nothing.
        if err is not None:
            append(str(err))

    return report


class ReportingProducer(Producer):
    """A producer whose delivery reports go to its own :attr:`failures`, set once for every message: a callback
    passed with each message cost confluent-kafka a Python reference and a state of its own per message."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.failures: list[str] = []
        super().__init__({**config, "on_delivery": failure_collector(self.failures)})


class IdempotentProducerHook(KafkaProducerHook):
    """A :class:`KafkaProducerHook` whose producer is always idempotent with ``acks=all``.

    :param kafka_config_id: the Kafka connection (``conn_type kafka``, librdkafka settings in extra).
    :param settings: a task's own producer settings, over the connection's extra (:func:`task_settings`).
    """

    def __init__(self, kafka_config_id: str, settings: Mapping[str, Any] | None = None) -> None:
        super().__init__(kafka_config_id)
        self.settings = dict(settings or {})

    def _get_client(self, config: dict[str, Any]) -> ReportingProducer:
        return ReportingProducer({**DEFAULT_SETTINGS, **config, **self.settings, **REQUIRED_SETTINGS})

    def get_producer(self) -> ReportingProducer:
        return cast(ReportingProducer, super().get_producer())  # made by _get_client above

    def client_config(self) -> dict[str, Any]:
        """The connection's settings without the producer defaults: for admin clients and consumers."""
        return {k: v for k, v in self._build_config().items() if k not in DEFAULT_SETTINGS}

    def admin(self) -> AdminClient:
        return AdminClient(self.client_config())

    def transactional_producer(self, transactional_id: str) -> ReportingProducer:
        """An idempotent producer for Kafka transactions under ``transactional_id``."""
        config = {**DEFAULT_SETTINGS, **self._build_config(), **self.settings, **REQUIRED_SETTINGS}
        return ReportingProducer({**config, "transactional.id": transactional_id})


def task_settings(kafka: KafkaConfig) -> dict[str, Any]:
    """The producer settings a task's ``kafka`` section sets over its connection's."""
    settings: dict[str, Any] = {}
    if kafka.partitioner is not None:
        settings["partitioner"] = kafka.partitioner
    if kafka.compression is not None:
        settings["compression.type"] = kafka.compression
    return settings


def ensure_topic(
    admin: AdminClient,
    topic: str,
    partitions: int,
    replication: int | None,
    create: bool,
    task_label: str,
    timeout: float = 15.0,
    config: dict[str, str] | None = None,
    refused: str | None = None,
) -> bool:
    """Make sure ``topic`` exists; create it (with the topic ``config``) when allowed. Returns True when created.
    ``refused``: why it may not be created, and what to do, when that is not ``kafka.create_topic`` being false.

    A created topic gets :func:`new_topic_settings`. A topic with one replica is logged as a warning: the
    producer's ``acks=all`` then waits for a single broker, whose loss loses the topic.
    """
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise DeliveryError(f"task {task_label}: Kafka is unreachable while checking topic '{topic}': {exc}") from exc
    info = metadata.topics.get(topic)
    if info is not None and info.error is None:
        replicas = min((len(p.replicas) for p in info.partitions.values()), default=0)
        warn_single_replica(task_label, topic, replicas)
        return False
    if not create:
        why = refused or "kafka.create_topic is false; create it or enable create_topic"
        raise DeliveryError(f"task {task_label}: Kafka topic '{topic}' does not exist and {why}")
    replication, settings = new_topic_settings(replication, len(metadata.brokers), config)
    warn_single_replica(task_label, topic, replication)
    return create_topic(admin, topic, partitions, replication, settings, task_label, timeout)


def new_topic_settings(
    replication: int | None, brokers: int, config: dict[str, str] | None
) -> tuple[int, dict[str, str]]:
    """The replication and topic config of a topic created on a cluster of ``brokers``: ``replication`` None means
    min(3, brokers); ``min.insync.replicas`` is one below the replication (at least 1) unless ``config`` sets it."""
    replication = replication or max(1, min(3, brokers))
    return replication, {"min.insync.replicas": str(max(1, replication - 1)), **(config or {})}


def create_topic(
    admin: AdminClient,
    topic: str,
    partitions: int,
    replication: int,
    config: dict[str, str],
    task_label: str,
    timeout: float,
) -> bool:
    """Create ``topic``; True when created here, False when it exists already (another run created it first)."""
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=config)],
        operation_timeout=timeout,
    )[topic]
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise DeliveryError(
            f"task {task_label}: Kafka topic '{topic}' is missing and could not be created "
            f"({partitions} partitions, replication {replication}): {exc}"
        ) from exc
    return True


def warn_single_replica(task_label: str, topic: str, replicas: int) -> None:
    if replicas == 1:
        log.warning(
            "task %s: Kafka topic '%s' has a single replica: acks=all waits for one broker, and losing it loses the "
            "topic; on a cluster, set kafka.replication_factor (default min(3, brokers)) or add replicas",
            task_label,
            topic,
        )


class Publisher(Protocol):
    """Where a chunk's batches go: ``send`` hands a batch over, ``confirm`` waits until it is delivered."""

    def delivered(self, batch: Batch) -> RunCounts | None:
        """The counts of ``batch`` when an earlier attempt already delivered it for good, else None."""

    def send(self, batch: Batch, messages: Sequence[Message], counts: RunCounts) -> None:
        """Hand a batch's messages over without waiting; ``counts``: what the batch adds to its run."""

    def confirm(self) -> int:
        """Wait until every message of the last :meth:`send` is delivered; return how many went to the task's
        topic (dead letters to a dead-letter topic are not counted). Raises DeliveryError otherwise."""

    def close(self) -> None:
        """Release the producer's resources."""


class DryRunPublisher:
    """A dry run publishes nothing."""

    def delivered(self, batch: Batch) -> RunCounts | None:
        return None

    def send(self, batch: Batch, messages: Sequence[Message], counts: RunCounts) -> None:
        return None

    def confirm(self) -> int:
        return 0

    def close(self) -> None:
        return None


class KafkaPublisher:
    """Produces one batch of messages and returns only when Kafka confirmed every one of them.

    The provider's ProduceToTopicOperator only logs failed deliveries; a crawl must not mark a batch done
    unless every message was delivered: the producer reports only failures (``delivery.report.only.error``), which
    it collects in its ``failures``, and a batch counts as delivered when no failure was reported and ``flush`` left
    nothing queued.

    :param producer: an idempotent confluent-kafka producer that collects its failed deliveries.
    :param topic: the task's topic (a message with its own ``topic`` goes there instead: a routed record, a dead
        letter, a marker).
    :param task_label: the crawl task id, for error messages.
    :param flush_timeout: seconds to wait for the delivery reports of one batch.
    :param prepare: called with the routed topics (of messages marked ``routed``) a batch is the first to send to,
        before anything is produced: it makes sure they exist as the task wants them.
    """

    def __init__(
        self,
        producer: ReportingProducer,
        topic: str,
        task_label: str,
        flush_timeout: float = 120.0,
        prepare: Callable[[set[str]], None] | None = None,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.task_label = task_label
        self.flush_timeout = flush_timeout
        self.prepare = prepare
        self._routes: set[str] = set()  # routed topics met so far: prepared once, not again
        self._failures: list[str] = producer.failures
        self._to_topic = 0
        self._expected = 0
        self._topics: list[str] = [topic]
        self._batch: Batch | None = None

    def delivered(self, batch: Batch) -> RunCounts | None:
        return None

    def close(self) -> None:
        return None

    def send(self, batch: Batch, messages: Sequence[Message], counts: RunCounts) -> None:
        """Hand ``messages`` to the producer without waiting; :meth:`confirm` waits for their reports."""
        self._batch = batch
        self.produce(messages)

    def produce(self, messages: Sequence[Message]) -> None:
        self._failures.clear()
        self._expected = len(messages)
        # Records: messages to the task's topic or routed (not dead letters or markers), all delivered or none counted.
        self._to_topic = sum(1 for m in messages if m.topic is None or m.topic == self.topic or m.routed)
        self._topics = sorted({m.topic or self.topic for m in messages})
        routed = {m.topic for m in messages if m.routed} - self._routes
        if routed:
            if self.prepare is not None:
                self.prepare(routed)  # type: ignore[arg-type]  # a routed message names its topic
            self._routes |= routed  # type: ignore[arg-type]
        produce, own = self.producer.produce, self.topic
        for message in messages:
            topic = message.topic or own
            while True:
                try:
                    # Positional, as it runs once per message (keywords cost a sixth of the call): topic, value, key,
                    # partition (-1: the partitioner's), callback and its alias (None: the producer's), timestamp,
                    # headers.
                    produce(topic, message.value, message.key, -1, None, None, message.timestamp, message.headers)  # type: ignore[arg-type]
                    break
                except BufferError:
                    # The local queue is full: serve delivery reports to make room, then try again.
                    self.producer.poll(0.1)
                except KafkaException as exc:
                    raise DeliveryError(f"task {self.task_label}: cannot produce to '{topic}': {exc}") from exc

    def confirm(self) -> int:
        """Wait for the delivery reports of the last :meth:`send`; raise DeliveryError unless all succeeded. Returns
        how many were records (to the task's topic or routed), not dead letters or markers."""
        if not self._expected:
            return 0
        # Delivery reports are served here (and on a full queue above), not after every message.
        remaining = self.flush()
        self.check_delivered(remaining)
        return self._to_topic

    def flush(self) -> int:
        """Serve the delivery reports, waiting up to the flush timeout; the number of messages still queued.

        A fatal error (a transactional producer fenced by a newer one) raised while reports are being served reaches
        the delivery callback (:func:`failure_collector`) with the exception pending, and surfaces as a SystemError
        caused by it: the KafkaException itself is raised instead, for the callers that handle it."""
        try:
            return self.producer.flush(self.flush_timeout)
        except SystemError as exc:
            if isinstance(exc.__cause__, KafkaException):
                raise exc.__cause__ from None
            raise

    @property
    def where(self) -> str:
        return f"offsets [{self._batch.lo}, {self._batch.hi})" if self._batch else "no batch"

    def check_delivered(self, remaining: int) -> None:
        """Raise DeliveryError unless every message of the last send was delivered: none reported failed and none left
        queued (``remaining``: the messages a flush left queued)."""
        where = self.where
        if remaining or self._failures:
            sample = "; ".join(sorted(set(self._failures))[:3]) or "no delivery report"
            delivered = max(0, self._expected - len(self._failures) - remaining)
            raise DeliveryError(
                f"task {self.task_label}: Kafka confirmed {delivered} of {self._expected} messages to "
                f"{' and '.join(map(repr, self._topics))} ({where}) within {self.flush_timeout:.0f}s: {sample}. "
                "The batch stays not done and is retried; check the broker and the topic."
            )
