"""Exactly-once delivery (``kafka.delivery: exactly_once``): each batch in one Kafka transaction with a marker.

A batch's records, its dead letters and a *marker* (the batch's offsets and counts) are produced in one
transaction to the topic, the dead-letter topic and the task's compacted marker topic. A later attempt reads
the markers back with ``isolation.level=read_committed`` before it produces anything: a batch whose marker is
there was committed to Kafka, even if the process died before PostgreSQL marked it done, so it is only
recorded as done, never produced again. A transaction that did not commit is invisible to read_committed
consumers and is produced again.

Fencing: the transactional id is stable per chunk (``crawler_ops.<task>.<lo>-<hi>``), so a retry of the chunk,
or another run that planned the same chunk, fences the earlier attempt in Kafka (its transaction is aborted and
it can produce no more); any other overlap is excluded by the batch claims, renewed before each batch is
produced and again just before its transaction commits: a worker that stopped past its lease (a pause, not a
crash) while another run, whose plan has other chunks and so another transactional id, took its batch aborts the
transaction instead of committing the batch a second time. A marker counts only for the batch row it was written
for (``generation``: the run that created the row), so after a reset the same offsets are crawled and published
again. Replays and backfills take no claims and have no batch rows: their markers are their run's own (keyed by run
and offset), so a retried or cleared replay or backfill run publishes each record of its range once, and a new run
publishes the range again.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from crawler_ops.errors import DeliveryError
from crawler_ops.hooks.kafka.producer import KafkaPublisher, ReportingProducer
from crawler_ops.message.records import Message
from crawler_ops.planning import Batch
from crawler_ops.results import RunCounts

# The marker topic is compacted: one marker per batch start offset survives.
MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact"}
# An abort gets at least this long, however short the delivery bound: a transaction left half-aborted refuses every
# later batch of the producer.
MIN_ABORT_S = 10.0


class MarkerLog:
    """The batch completion markers of one crawl task.

    :param client_config: the Kafka connection's settings (bootstrap servers, security).
    :param topic: the task's marker topic.
    :param task_id: the crawl task.
    :param run_id: the run writing markers.
    :param generations: batch start offset -> the run that created the batch row; markers of other rows do not count.
    :param timeout: seconds to read the markers before giving up.
    :param per_run: the markers of this run only (replays and backfills, which have no batch rows).
    """

    def __init__(
        self,
        client_config: Mapping[str, Any],
        topic: str,
        task_id: str,
        run_id: str,
        generations: Mapping[int, str],
        timeout: float = 60.0,
        per_run: bool = False,
    ) -> None:
        self.client_config = dict(client_config)
        self.topic, self.task_id, self.run_id = topic, task_id, run_id
        self.generations = dict(generations)
        self.timeout = timeout
        self.per_run = per_run
        self._markers: dict[str, dict[str, Any]] | None = None
        self._reading = threading.Lock()  # the fetch threads ask at once: the markers are read once

    def key(self, batch: Batch) -> str:
        """The marker's key: one per batch start offset (and run, for a run's own markers)."""
        return f"{self.task_id}:{self.run_id}:{batch.lo}" if self.per_run else f"{self.task_id}:{batch.lo}"

    def generation(self, batch: Batch) -> str | None:
        """The batch row (the run that created it) whose marker counts; for a run's own markers, the run."""
        return self.run_id if self.per_run else self.generations.get(batch.lo)

    def message(self, batch: Batch, counts: RunCounts) -> Message:
        value = {
            "task": self.task_id,
            "lo": batch.lo,
            "hi": batch.hi,
            "generation": self.generation(batch),
            "run_id": self.run_id,
            "counts": counts.to_dict(),
        }
        return Message(self.key(batch).encode(), json.dumps(value).encode(), [], self.topic)

    def delivered(self, batch: Batch) -> RunCounts | None:
        """The counts in ``batch``'s committed marker, when it has one written for its current row."""
        with self._reading:
            if self._markers is None:
                self._markers = self.read()
        marker = self._markers.get(self.key(batch))
        if marker is None or marker.get("hi") != batch.hi:
            return None
        if marker.get("generation") != self.generation(batch):
            return None
        return RunCounts.from_dict(marker.get("counts") or {})

    def read(self) -> dict[str, dict[str, Any]]:
        """Every committed marker of the task, read to the end of each partition (its last stable offset)."""
        consumer = Consumer(
            {
                **self.client_config,
                "group.id": f"crawler_ops.markers.{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            return self._read(consumer)
        finally:
            consumer.close()

    def _read(self, consumer: Consumer) -> dict[str, dict[str, Any]]:
        deadline = time.monotonic() + self.timeout
        metadata = consumer.list_topics(self.topic, timeout=self.timeout).topics.get(self.topic)
        if metadata is None or metadata.error is not None:
            raise DeliveryError(f"task {self.task_id}: cannot read the marker topic '{self.topic}': {metadata}")
        open_partitions = set(metadata.partitions)
        consumer.assign([TopicPartition(self.topic, p, 0) for p in open_partitions])
        markers: dict[str, dict[str, Any]] = {}
        while open_partitions:
            if time.monotonic() > deadline:
                raise DeliveryError(
                    f"task {self.task_id}: could not read the marker topic '{self.topic}' to its end within "
                    f"{self.timeout:.0f}s; nothing was produced. Check the broker; the task is retried."
                )
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
                    continue
                raise DeliveryError(f"task {self.task_id}: reading the marker topic '{self.topic}' failed: {error}")
            key, value = message.key(), message.value()
            if key is None:
                continue
            if value is None:
                markers.pop(key.decode(), None)
            else:
                markers[key.decode()] = json.loads(value)
        return markers


class TransactionalPublisher(KafkaPublisher):
    """Produces each batch in one Kafka transaction, with its marker when ``markers`` is given.

    :param producer: a producer with a ``transactional.id``; its transactions are initialised here, which
        fences every earlier producer with that id and aborts its open transaction.
    :param markers: the task's markers, or the run's own (replays and backfills); None: no markers.
    :param holds: whether this worker still holds a batch's claim (renewing it), asked before its transaction
        commits; None: batches are not claimed.
    """

    def __init__(
        self,
        producer: ReportingProducer,
        topic: str,
        task_label: str,
        markers: MarkerLog | None,
        flush_timeout: float = 120.0,
        holds: Callable[[Batch], bool] | None = None,
        prepare: Callable[[set[str]], None] | None = None,
    ) -> None:
        super().__init__(producer, topic, task_label, flush_timeout, prepare)
        self.markers = markers
        self.holds = holds
        self._open = False
        try:
            producer.init_transactions(flush_timeout)
        except KafkaException as exc:
            raise DeliveryError(
                f"task {task_label}: cannot start Kafka transactions: {exc}. Nothing was claimed or published; the "
                "batches stay pending. Exactly-once delivery needs brokers with the transaction state log (Kafka "
                "0.11+, transaction.state.log.replication.factor within the cluster) and a transaction.timeout.ms "
                "(connection extra) within the brokers' transaction.max.timeout.ms"
            ) from exc

    def delivered(self, batch: Batch) -> RunCounts | None:
        return None if self.markers is None else self.markers.delivered(batch)

    def send(self, batch: Batch, messages: Sequence[Message], counts: RunCounts) -> None:
        """Begin the batch's transaction and produce its messages and marker (nothing for an empty batch:
        producing it again cannot duplicate anything)."""
        self._batch = batch
        if not messages:
            return
        marker = [self.markers.message(batch, counts)] if self.markers is not None else []
        self.producer.begin_transaction()
        self._open = True
        self.produce([*messages, *marker])

    def confirm(self) -> int:
        """Commit the batch's transaction once every message was delivered; abort it otherwise."""
        if not self._open:
            return 0
        self._open = False
        try:
            self.check_delivered(self.flush())
            self.check_held()
            self.producer.commit_transaction(self.flush_timeout)
        except DeliveryError:
            self.abort()
            raise
        except KafkaException as exc:
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].txn_requires_abort():
                self.abort()
            raise DeliveryError(
                f"task {self.task_label}: the Kafka transaction of {self.where} did not commit: {exc}. Nothing of it "
                "is visible to read_committed consumers; the batch stays not done and is retried (a fenced "
                "producer means a newer attempt of this chunk took over)."
            ) from exc
        return self._to_topic

    def check_held(self) -> None:
        """Raise DeliveryError when the batch's claim was taken over (the transaction is then aborted)."""
        if self.holds is None or self._batch is None or self.holds(self._batch):
            return
        raise DeliveryError(
            f"task {self.task_label}: the batch at {self.where} is no longer claimed by this worker (its lease expired "
            "and another worker took it); its Kafka transaction is aborted, so nothing of it is visible to "
            "read_committed consumers"
        )

    def abort(self) -> None:
        with suppress(KafkaException):
            self.producer.abort_transaction(max(self.flush_timeout, MIN_ABORT_S))

    def close(self) -> None:
        if self._open:
            self.abort()


def transactional_id(task_id: str, batches: Sequence[Batch], run_id: str | None = None) -> str:
    """Stable per chunk, so a retry or another run of the same chunk fences the earlier attempt; with ``run_id``
    (replays and backfills, which take no claims), stable per run and chunk."""
    lo, hi = min(b.lo for b in batches), max(b.hi for b in batches)
    return f"crawler_ops.{task_id}.{f'{run_id}.' if run_id else ''}{lo}-{hi}"
