"""What a task's topic must be for the messages it is sent: the settings the task gives it (``kafka.topic_config``),
and, when a message carries its record's date, a retention that keeps the window's records and timestamp bounds the
broker accepts them within. Checked when a run is planned, before anything is produced."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from crawler_ops.errors import ConfigError, DeliveryError, RegistryError
from crawler_ops.hooks.kafka.producer import ensure_topic

if TYPE_CHECKING:
    from crawler_ops.config import KafkaConfig

log = logging.getLogger(__name__)
DAY_MS = 86_400_000


def setting_text(value: object) -> str:
    """A topic setting as Kafka writes it: booleans in lower case, numbers as their digits."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def topic_settings(admin: AdminClient, topic: str, task_label: str, timeout: float = 15.0) -> dict[str, str]:
    """The topic's effective settings (its own, else the broker's defaults). A topic created a moment ago may be
    unknown to the broker answering for a while: asked again until ``timeout``."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    deadline = time.monotonic() + timeout
    while True:
        try:
            future = admin.describe_configs([resource], request_timeout=timeout)[resource]
            entries = future.result(timeout=timeout)
            return {name: entry.value for name, entry in entries.items() if entry.value is not None}
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            unknown = isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise DeliveryError(
                    f"task {task_label}: cannot read the settings of Kafka topic '{topic}': {exc}"
                ) from exc
        time.sleep(0.2)


def config_drift(wanted: Mapping[str, object], actual: Mapping[str, str]) -> list[str]:
    """Each wanted setting the topic does not have, as ``name: the task says X, the topic has Y``."""
    drift = []
    for name, value in wanted.items():
        text = setting_text(value)
        if actual.get(name) != text:
            drift.append(f"{name}: the task says {text}, the topic has {actual.get(name, '(not set)')}")
    return drift


def date_problems(
    actual: Mapping[str, str], days: float, oldest: datetime, now: datetime
) -> tuple[list[str], list[str]]:
    """Errors and warnings for a topic whose messages carry their record's date, for a task keeping ``days`` of
    records and a run whose oldest kept date may be ``oldest``.

    Errors: the broker would refuse the dates (``message.timestamp.before.max.ms``), or the topic deletes records
    younger than the task's window (``retention.ms`` under ``days``). Warnings: this run's window reaches more than
    a day past the retention (a backfill or a late re-run: its oldest records are deleted soon after they are
    published), or the broker stamps messages itself (``LogAppendTime``)."""
    errors: list[str] = []
    warnings: list[str] = []
    age_ms = max(0, int((now - oldest).total_seconds() * 1000))
    before = int(actual.get("message.timestamp.before.max.ms", str(2**63 - 1)))
    if before < age_ms:
        errors.append(
            f"message.timestamp.before.max.ms is {before} ({before / DAY_MS:.1f} days) but this run keeps records "
            f"dated from {oldest.isoformat()} ({age_ms / DAY_MS:.1f} days ago): the broker would refuse them"
        )
    retention = int(actual.get("retention.ms", "-1"))
    deletes = "delete" in actual.get("cleanup.policy", "delete")
    if deletes and retention >= 0 and retention < days * DAY_MS:
        errors.append(
            f"retention.ms is {retention} ({retention / DAY_MS:.1f} days), shorter than filter.days ({days:g}): "
            "messages stamped with their record's date would be deleted soon after they are published"
        )
    elif deletes and 0 <= retention < age_ms - DAY_MS:  # a day's grace: a scheduled run starts after its ref time
        warnings.append(
            f"this run keeps records dated from {oldest.isoformat()} ({age_ms / DAY_MS:.1f} days ago), older than "
            f"the topic's retention.ms ({retention / DAY_MS:.1f} days): those are deleted soon after they are published"
        )
    if actual.get("message.timestamp.type") == "LogAppendTime":
        warnings.append("message.timestamp.type is LogAppendTime: the broker stamps each message when it appends it")
    return errors, warnings


def check_topic(
    admin: AdminClient,
    topic: str,
    task_label: str,
    wanted: Mapping[str, object],
    dated: tuple[float, datetime, datetime] | None,
) -> None:
    """Fail (ConfigError) when the topic's settings differ from ``wanted`` or cannot hold messages stamped with their
    record's date (``dated``: the task's days, the run's oldest kept date, and now); log the warnings of
    :func:`date_problems`."""
    if not wanted and dated is None:
        return
    actual = topic_settings(admin, topic, task_label)
    problems = config_drift(wanted, actual)
    if problems:
        fix = " ".join(f"--add-config {name}={setting_text(value)}" for name, value in wanted.items())
        raise ConfigError(
            f"task {task_label}: Kafka topic '{topic}' differs from kafka.topic_config: {'; '.join(problems)}. Nothing "
            f"was produced. Change the topic (kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
            f"{fix}) or the task's kafka.topic_config"
        )
    if dated is None:
        return
    errors, warnings = date_problems(actual, *dated)
    for warning in warnings:
        log.warning("task %s: Kafka topic '%s': %s", task_label, topic, warning)
    if errors:
        raise ConfigError(
            f"task {task_label}: Kafka topic '{topic}' cannot keep messages stamped with their record's date "
            f"(kafka.timestamp: record_date): {'; '.join(errors)}. Nothing was produced. Raise the topic's setting "
            "(kafka.topic_config for a topic crawler_ops creates), or set kafka.timestamp: produce_time"
        )


@dataclass
class TaskTopics:
    """Makes the topics a run sends records to ready, before anything is produced to them: each exists (created with
    ``kafka.topic_config`` when ``kafka.create_topic`` allows) and holds what the task sends it (:func:`check_topic`).

    :param admin: gives the admin client, asked for when a topic is first prepared.
    :param kafka: the task's Kafka section.
    :param task_label: the crawl task id, for messages.
    :param days: the task's ``filter.days``.
    :param oldest: the oldest date the run keeps (its window's start).

    It creates at most ``kafka.max_new_topics`` topics (a source decides the names a topic_template gives).
    """

    admin: Callable[[], AdminClient]
    kafka: KafkaConfig
    task_label: str
    days: float
    oldest: datetime
    created: int = 0
    #: The value schema the run's plan settled (json_schema or avro): registered under each routed topic's subject.
    schema_id: int | None = None

    def __call__(self, topics: Iterable[str]) -> None:
        for topic in sorted(topics):
            self.prepare(topic)

    @cached_property
    def client(self) -> AdminClient:
        return self.admin()

    def prepare(self, topic: str) -> None:
        kafka = self.kafka
        settings = {name: setting_text(value) for name, value in kafka.topic_config.items()}
        capped = None
        if kafka.create_topic and self.created >= kafka.max_new_topics:
            capped = (
                f"this chunk created kafka.max_new_topics ({kafka.max_new_topics}) topics for topic_template "
                "already; nothing was produced to it. Create the topic, raise max_new_topics, or narrow "
                "kafka.routed_topics"
            )
        self.created += ensure_topic(
            self.client,
            topic,
            kafka.partitions,
            kafka.replication_factor,
            kafka.create_topic and capped is None,
            self.task_label,
            config=settings,
            refused=capped,
        )
        dated = (self.days, self.oldest, datetime.now(UTC)) if kafka.timestamp == "record_date" else None
        check_topic(self.client, topic, self.task_label, kafka.topic_config, dated)
        if self.schema_id is not None and topic != kafka.topic:
            register_routed(kafka, topic, self.schema_id, self.task_label)


def register_routed(kafka: KafkaConfig, topic: str, schema_id: int, task_label: str) -> None:
    """The schema ``schema_id`` registered under ``topic``'s subject (a version of it already: nothing new), so a
    consumer of a routed topic finds its schema by the topic's name too. A subject whose compatibility refuses it
    fails the batch naming it, before anything is produced to the topic."""
    from crawler_ops.hooks.kafka.registry import SchemaRegistryHook, schema_type_of, subject_of

    registry = SchemaRegistryHook(kafka.registry_conn_id)
    try:
        schema = registry.schema(schema_id)
        registry.register(subject_of(topic), schema, schema_type_of(kafka.value_format))
    except RegistryError as exc:
        raise RegistryError(
            f"task {task_label}: the routed topic {topic!r}'s subject {subject_of(topic)!r} does not take the value "
            f"schema (id {schema_id}) the run publishes with: {exc}; nothing was produced to it. Align that subject's "
            "schema or compatibility with the task's topic, or narrow kafka.routed_topics",
            retriable=exc.retriable,
            status=exc.status,
        ) from exc
    finally:
        registry.close()
