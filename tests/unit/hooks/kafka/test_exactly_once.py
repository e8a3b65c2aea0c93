"""Unit tests of how crawler_ops.hooks.kafka.exactly_once reads the marker topic: to the end of every partition, through
empty polls, keyless messages and tombstones, within its deadline (a fake consumer stands in for librdkafka; the
same reading on the real broker is in tests/integration/logic/test_kafka_delivery.py)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from crawler_ops.errors import DeliveryError
from crawler_ops.hooks.kafka import exactly_once
from crawler_ops.hooks.kafka.exactly_once import MarkerLog
from crawler_ops.planning import Batch


@dataclass
class Event:
    """What one poll returns: a message of ``partition``, or an error."""

    partition: int
    key: bytes | None = None
    value: bytes | None = None
    code: int | None = None

    def error(self) -> KafkaError | None:
        return None if self.code is None else KafkaError(self.code, "test")


def eof(partition: int) -> Event:
    return Event(partition, code=KafkaError._PARTITION_EOF)


def marker(partition: int, key: str, lo: int) -> Event:
    return Event(partition, key.encode(), json.dumps({"lo": lo}).encode())


@dataclass
class FakeConsumer:
    """A consumer of the marker topic ``m`` with ``partitions``; each poll returns the next of ``events``
    (None: nothing arrived within the poll), then None for ever."""

    partitions: list[int]
    events: list[Event | None]
    assigned: list[tuple[str, int, int]] = field(default_factory=list)

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=dict.fromkeys(self.partitions))})

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = sorted((tp.topic, tp.partition, tp.offset) for tp in partitions)

    def poll(self, timeout: float) -> Any:
        event = self.events.pop(0) if self.events else None
        if event is None:
            return None
        return SimpleNamespace(
            error=event.error, partition=lambda: event.partition, key=lambda: event.key, value=lambda: event.value
        )


def log(timeout: float = 60.0) -> MarkerLog:
    return MarkerLog({}, "m", "t", "run_1", {}, timeout=timeout)


def test_markers_are_read_from_the_start_to_the_end_of_every_partition():
    consumer = FakeConsumer(
        [0, 1],
        [
            None,
            marker(0, "t:0", 0),
            Event(0, None, b"{}"),
            Event(0, b"t:90", None),
            eof(0),
            None,
            marker(1, "t:10", 10),
            marker(1, "t:20", 20),
            Event(1, b"t:20", None),
            eof(1),
            marker(1, "t:30", 30),
        ],
    )

    markers = log()._read(consumer)  # type: ignore[arg-type]

    assert consumer.assigned == [("m", 0, 0), ("m", 1, 0)], "every partition, from its first offset"
    assert markers == {"t:0": {"lo": 0}, "t:10": {"lo": 10}}, "a keyless message is skipped, a tombstone removes"


def test_a_read_error_fails_naming_the_task_and_the_marker_topic():
    consumer = FakeConsumer([0], [marker(0, "t:0", 0), Event(0, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)])

    with pytest.raises(DeliveryError) as failed:
        log()._read(consumer)  # type: ignore[arg-type]

    assert str(failed.value).startswith("task t: reading the marker topic 'm' failed: ")
    assert "TOPIC_AUTHORIZATION_FAILED" in str(failed.value)


def test_markers_not_read_to_the_end_within_the_timeout_fail_the_batch_before_it_is_produced(monkeypatch):
    clock = itertools.count(0, 2.5)
    monkeypatch.setattr(exactly_once, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    consumer = FakeConsumer([0], [marker(0, "t:0", 0)])

    with pytest.raises(DeliveryError) as failed:
        log(timeout=5)._read(consumer)  # type: ignore[arg-type]

    assert str(failed.value) == (
        "task t: could not read the marker topic 'm' to its end within 5s; nothing was produced. Check the broker; "
        "the task is retried."
    )
    assert next(clock) == 10, "given up on the first look at the clock past the deadline (0 + 5 s), not at it"


def test_a_batch_rows_marker_is_keyed_by_offset_and_a_runs_own_marker_by_run_and_offset():
    rows = MarkerLog({}, "m", "t", "run_2", {10: "run_1"})
    own = MarkerLog({}, "m", "t", "run_2", {10: "run_1"}, per_run=True)
    assert (rows.key(Batch(10, 20)), rows.generation(Batch(10, 20))) == ("t:10", "run_1"), "the row's creating run"
    assert rows.generation(Batch(20, 30)) is None, "no batch row"
    assert (own.key(Batch(10, 20)), own.generation(Batch(10, 20))) == ("t:run_2:10", "run_2")
