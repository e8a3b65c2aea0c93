"""Kafka for the benchmark: fresh topics, a producer with the project's settings that counts deliveries,
and every key of a topic checked against the source's ground truth."""

from __future__ import annotations

import atexit
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from crawlbench.common import PARTITIONS, BenchError, Headers
from crawlbench.environment import Stack

#: Set it (to anything) to keep the benchmark's topics after it ends, to read them.
KEEP_TOPICS = "CRAWLBENCH_KEEP_TOPICS"
_datasets: set[str] = set()  # data sets whose topics are deleted when the process ends


def drop_topics_at_exit(name: str) -> str:
    """Delete the topics of data set ``name`` (``name`` itself and ``name.*``) when this process ends, unless
    :data:`KEEP_TOPICS` is set: a 65-page run leaves about 100 MB in the dev broker, and sitting after sitting of
    benchmarks filled gigabytes. Returns ``name``."""
    if not _datasets:
        atexit.register(drop_dataset_topics)
    _datasets.add(name)
    return name


def drop_dataset_topics() -> None:
    """Delete the topics of the data sets :func:`drop_topics_at_exit` was given, on the stack's broker."""
    bootstrap = os.environ.get("CRAWLER_OPS_KAFKA_BOOTSTRAP")
    if os.environ.get(KEEP_TOPICS) or not bootstrap or not _datasets:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        names = [t for t in admin.list_topics(timeout=10).topics if t.split(".", 1)[0] in _datasets]
        futures = admin.delete_topics(names, operation_timeout=30) if names else {}
        for future in futures.values():
            future.result(timeout=30)
    except KafkaException as exc:
        print(f"crawlbench: the data sets' topics were not all deleted: {exc}", flush=True)


def create_topic(bootstrap: str, topic: str) -> None:
    """Create a fresh topic with :data:`PARTITIONS` partitions (untimed)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        raise BenchError(f"cannot create Kafka topic {topic}: {exc}") from exc
    wait_for_leaders(admin, topic)


def wait_for_leaders(admin: AdminClient, topic: str, timeout: float = 30.0) -> None:
    """Wait until every partition of a new topic has a leader, so the first produce does not wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        info = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            info is not None
            and info.error is None
            and len(info.partitions) == PARTITIONS
            and all(p.leader >= 0 and p.error is None for p in info.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"Kafka topic {topic} has no leader for every partition after {timeout:.0f}s")
        time.sleep(0.1)


class CountingProducer:
    """An idempotent producer with the project's settings that counts delivered messages. Under those settings only
    failures are reported (``delivery.report.only.error``): a message counts as delivered once a flush leaves nothing
    queued and no failure was reported."""

    def __init__(self, stack: Stack) -> None:
        self.producer = Producer({"bootstrap.servers": stack.bootstrap, "log_level": 4, **stack.producer_settings})
        self.delivered = 0
        self.pending = 0  # produced since the last flush
        self.failures: list[str] = []

    def warm_up(self, scratch_topic: str, target_topic: str) -> None:
        """Connect, get the idempotent producer id (one message to a scratch topic) and the target's
        metadata before anything is timed, as a long-lived producer would have them."""
        self.produce(scratch_topic, b"warm-up", b"{}")
        self.flush("warm-up")
        self.delivered = 0
        self.producer.list_topics(target_topic, timeout=10)

    def _report(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.failures.append(str(err))

    def produce(self, topic: str, key: bytes, value: bytes, headers: Headers | None = None) -> None:
        """Produce one message; delivery reports are served when the local queue is full and by flush."""
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=self._report)
                self.pending += 1
                return
            except BufferError:
                self.producer.poll(0.1)

    def flush(self, what: str) -> None:
        """Wait for every delivery report; raise BenchError when one failed."""
        remaining = self.producer.flush(120)
        if remaining or self.failures:
            raise BenchError(f"{what}: {remaining} messages unconfirmed, failures: {self.failures[:3]}")
        self.delivered += self.pending
        self.pending = 0


def warm_producer(stack: Stack, scratch: str, topic: str) -> CountingProducer:
    """A fresh topic and a producer for it, connected and warmed up (untimed)."""
    create_topic(stack.bootstrap, topic)
    producer = CountingProducer(stack)
    producer.warm_up(scratch, topic)
    return producer


def topic_keys(
    bootstrap: str,
    topic: str,
    timeout: float = 30.0,
    isolation: str = "read_committed",
    on_message: Callable[[Message], None] | None = None,
) -> Counter[str]:
    """Every key in ``topic`` from the beginning to each partition's current end, with multiplicity, as a consumer
    with ``isolation`` sees them; ``on_message`` is also given each message."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crawl-bench-{secrets.token_hex(4)}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # A transactional topic ends with commit markers, which are never delivered: its end is signalled.
            "enable.partition.eof": True,
        }
    )
    try:
        ends = partition_ends(consumer, topic, timeout)
        consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        return read_to_ends(consumer, topic, ends, timeout, on_message)
    finally:
        consumer.close()


def partition_ends(consumer: Consumer, topic: str, timeout: float) -> dict[int, int]:
    """The current end offset of each partition of ``topic``."""
    info = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if info is None or info.error is not None:
        raise BenchError(f"topic {topic} does not exist")
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in info.partitions}


def read_to_ends(
    consumer: Consumer,
    topic: str,
    ends: dict[int, int],
    timeout: float,
    on_message: Callable[[Message], None] | None = None,
) -> Counter[str]:
    """Consume the assigned partitions until each reaches its end; fail after ``timeout`` s without a message."""
    keys: Counter[str] = Counter()
    pending = {p for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + timeout
    while pending:
        # consume() waits for the whole batch or the timeout: ask often, with a short timeout.
        batch = consumer.consume(10_000, 0.2)
        if not batch and time.monotonic() > deadline:
            raise BenchError(f"topic {topic}: no message within {timeout}s, partitions {sorted(pending)} unread")
        if batch:
            deadline = time.monotonic() + timeout
        for msg in batch:
            if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                pending.discard(msg.partition())
                continue
            if msg.error():
                raise BenchError(f"topic {topic}: {msg.error()}")
            keys[(msg.key() or b"").decode()] += 1
            if on_message is not None:
                on_message(msg)
            if (msg.offset() or 0) + 1 >= ends[msg.partition()]:
                pending.discard(msg.partition())
    return keys


@dataclass
class KeyCheck:
    """The keys found in a topic against the ground truth's in-window ids."""

    expected: int
    received: int
    distinct: int
    missing: int
    extra: int
    duplicates: int
    sample_missing: list[str] = field(default_factory=list)
    sample_extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0

    def short(self) -> str:
        if self.ok:
            return f"yes ({self.distinct}, dup {self.duplicates})"
        return f"**NO**: missing {self.missing}, extra {self.extra}, dup {self.duplicates}"


def check_keys(keys: Counter[str], truth: frozenset[str]) -> KeyCheck:
    """Compare a topic's keys with the truth's in-window ids."""
    found = set(keys)
    missing, extra = truth - found, found - truth
    return KeyCheck(
        expected=len(truth),
        received=sum(keys.values()),
        distinct=len(found),
        missing=len(missing),
        extra=len(extra),
        duplicates=sum(n - 1 for n in keys.values() if n > 1),
        sample_missing=sorted(missing)[:5],
        sample_extra=sorted(extra)[:5],
    )


def check_topic(bootstrap: str, topic: str, truth: frozenset[str]) -> KeyCheck:
    """Read every key of ``topic`` and compare them with the truth."""
    return check_keys(topic_keys(bootstrap, topic), truth)
