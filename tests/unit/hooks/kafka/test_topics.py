"""Unit tests of the topic checks made when a run is planned: settings drift, and whether a topic keeps and accepts
messages stamped with their record's date."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

from crawler_ops.config.kafka import KafkaConfig
from crawler_ops.errors import ConfigError, DeliveryError
from crawler_ops.hooks.kafka import topics as topics_module
from crawler_ops.hooks.kafka.topics import (
    DAY_MS,
    TaskTopics,
    check_topic,
    config_drift,
    date_problems,
    setting_text,
    topic_settings,
)

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
WEEK_MS = str(7 * DAY_MS)


@pytest.mark.parametrize(("value", "text"), [(True, "true"), (False, "false"), (604800000, "604800000"), (0.5, "0.5")])
def test_a_setting_is_compared_as_kafka_writes_it(value: object, text: str) -> None:
    assert setting_text(value) == text


def test_drift_names_each_setting_that_differs_and_ignores_those_not_asked_for() -> None:
    actual = {"retention.ms": WEEK_MS, "cleanup.policy": "delete", "segment.ms": "1"}
    assert config_drift({"retention.ms": 7 * DAY_MS, "cleanup.policy": "delete"}, actual) == []
    assert config_drift({"cleanup.policy": "compact", "max.compaction.lag.ms": 10}, actual) == [
        "cleanup.policy: the task says compact, the topic has delete",
        "max.compaction.lag.ms: the task says 10, the topic has (not set)",
    ]


def test_a_retention_shorter_than_the_window_is_an_error() -> None:
    errors, _ = date_problems({"retention.ms": str(3 * DAY_MS)}, 7, NOW - timedelta(days=7), NOW)
    assert errors == [
        "retention.ms is 259200000 (3.0 days), shorter than filter.days (7): messages stamped with their record's "
        "date would be deleted soon after they are published"
    ]


def test_a_window_as_long_as_the_retention_passes_and_an_older_run_only_warns() -> None:
    assert date_problems({"retention.ms": WEEK_MS}, 7, NOW - timedelta(days=7, hours=1), NOW) == ([], [])
    errors, warnings = date_problems({"retention.ms": WEEK_MS}, 7, NOW - timedelta(days=30), NOW)
    assert errors == [] and "30.0 days ago), older than the topic's retention.ms (7.0 days)" in warnings[0]


@pytest.mark.parametrize(
    "settings",
    [{"retention.ms": "-1"}, {"retention.ms": "1000", "cleanup.policy": "compact"}],
)
def test_a_topic_that_does_not_delete_by_time_keeps_every_date(settings: dict[str, str]) -> None:
    assert date_problems(settings, 7, NOW - timedelta(days=400), NOW) == ([], [])


def test_dates_older_than_the_broker_accepts_are_an_error_and_append_time_a_warning() -> None:
    settings = {"message.timestamp.before.max.ms": str(2 * DAY_MS), "message.timestamp.type": "LogAppendTime"}
    errors, warnings = date_problems(settings, 7, NOW - timedelta(days=7), NOW)
    assert "message.timestamp.before.max.ms is 172800000 (2.0 days)" in errors[0] and "refuse" in errors[0]
    assert warnings == ["message.timestamp.type is LogAppendTime: the broker stamps each message when it appends it"]


def test_strings_are_compared_as_given() -> None:
    assert setting_text("CreateTime") == "CreateTime"


def test_dates_exactly_as_old_as_the_broker_accepts_pass_and_the_error_says_how_old() -> None:
    accepts = {"message.timestamp.before.max.ms": str(7 * DAY_MS)}
    assert date_problems(accepts, 7, NOW - timedelta(days=7), NOW) == ([], [])
    assert date_problems({"message.timestamp.before.max.ms": "0"}, 7, NOW, NOW) == ([], [])
    errors, _ = date_problems(accepts, 7, NOW - timedelta(days=8), NOW)
    assert errors == [
        f"message.timestamp.before.max.ms is {7 * DAY_MS} (7.0 days) but this run keeps records dated from "
        f"{(NOW - timedelta(days=8)).isoformat()} (8.0 days ago): the broker would refuse them"
    ]


def test_a_retention_of_zero_is_an_error_and_one_a_day_short_of_the_run_is_no_warning() -> None:
    errors, _ = date_problems({"retention.ms": "0"}, 7, NOW - timedelta(days=7), NOW)
    assert errors and errors[0].startswith("retention.ms is 0 (0.0 days), shorter than filter.days (7)")
    assert date_problems({"retention.ms": WEEK_MS}, 7, NOW - timedelta(days=8), NOW) == ([], [])
    _, warnings = date_problems({"retention.ms": WEEK_MS}, 7, NOW - timedelta(days=8, milliseconds=1), NOW)
    assert warnings == [
        f"this run keeps records dated from {(NOW - timedelta(days=8, milliseconds=1)).isoformat()} (8.0 days ago), "
        "older than the topic's retention.ms (7.0 days): those are deleted soon after they are published"
    ]


# --- reading and checking a topic (a fake admin client stands in for librdkafka's) ------------------------------------


class Clock:
    """Stands in for the ``time`` module of crawler_ops.hooks.kafka.topics: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Answer:
    """A describe_configs future: its result, or the exception it raises; records the timeout it was waited with."""

    def __init__(self, outcome: dict[str, str | None] | Exception, timeouts: list[float | None]) -> None:
        self.outcome = outcome
        self.timeouts = timeouts

    def result(self, timeout: float | None = None) -> dict[str, SimpleNamespace]:
        self.timeouts.append(timeout)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return {name: SimpleNamespace(value=value) for name, value in self.outcome.items()}


@dataclass
class FakeAdmin:
    """Answers describe_configs with ``answers`` in turn (the last one again once they run out), and knows the topics
    of ``existing`` (name -> partitions' replica counts); creates topics and records what it was asked."""

    answers: list[dict[str, str | None] | Exception] = field(default_factory=list)
    existing: dict[str, list[int]] = field(default_factory=dict)
    described: list[tuple[str, float | None]] = field(default_factory=list)
    waits: list[float | None] = field(default_factory=list)
    created: list[tuple[str, int, int, dict[str, str]]] = field(default_factory=list)

    def describe_configs(self, resources: list[ConfigResource], request_timeout: float) -> dict[Any, Answer]:
        (resource,) = resources
        assert resource.restype == ResourceType.TOPIC
        self.described.append((resource.name, request_timeout))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {resource: Answer(answer, self.waits)}

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        topics = {
            name: SimpleNamespace(
                error=None, partitions={i: SimpleNamespace(replicas=[0] * n) for i, n in enumerate(p)}
            )
            for name, p in self.existing.items()
            if name == topic
        }
        return SimpleNamespace(topics=topics, brokers={0: None})

    def create_topics(self, topics: list[NewTopic], operation_timeout: float) -> dict[str, Future[None]]:
        (new,) = topics
        self.created.append((new.topic, new.num_partitions, new.replication_factor, new.config))
        self.existing[new.topic] = [new.replication_factor] * new.num_partitions
        done: Future[None] = Future()
        done.set_result(None)
        return {new.topic: done}


def unknown_topic() -> KafkaException:
    return KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(topics_module, "time", fake)
    return fake


def test_a_topic_s_settings_are_read_without_those_it_leaves_unset(clock: Clock) -> None:
    admin = FakeAdmin([{"retention.ms": WEEK_MS, "cleanup.policy": "delete", "segment.jitter.ms": None}])
    assert topic_settings(admin, "jobs", "t") == {"retention.ms": WEEK_MS, "cleanup.policy": "delete"}  # type: ignore[arg-type]
    assert admin.described == [("jobs", 15.0)] and admin.waits == [15.0] and clock.sleeps == []


def test_a_topic_the_broker_does_not_know_yet_is_asked_again_until_the_timeout(clock: Clock) -> None:
    admin = FakeAdmin([unknown_topic(), unknown_topic(), {"retention.ms": WEEK_MS}])
    assert topic_settings(admin, "jobs", "t", timeout=5) == {"retention.ms": WEEK_MS}  # type: ignore[arg-type]
    assert clock.sleeps == [0.2, 0.2] and admin.waits == [5, 5, 5]

    never = FakeAdmin([unknown_topic()])
    with pytest.raises(DeliveryError, match=r"^task t: cannot read the settings of Kafka topic 'jobs': "):
        topic_settings(never, "jobs", "t", timeout=1)  # type: ignore[arg-type]
    assert 5 <= len(never.described) <= 7 and set(clock.sleeps) == {0.2}


@pytest.mark.parametrize("error", [KafkaException(KafkaError(KafkaError._TIMED_OUT)), KafkaException()])
def test_any_other_error_reading_a_topic_s_settings_fails_at_once(clock: Clock, error: KafkaException) -> None:
    admin = FakeAdmin([error, {"retention.ms": WEEK_MS}])
    with pytest.raises(DeliveryError, match=r"^task t: cannot read the settings of Kafka topic 'jobs'"):
        topic_settings(admin, "jobs", "t", timeout=5)  # type: ignore[arg-type]
    assert len(admin.described) == 1 and clock.sleeps == []


def test_a_task_that_wants_nothing_of_its_topic_does_not_read_it() -> None:
    admin = FakeAdmin()
    check_topic(admin, "jobs", "t", {}, None)  # type: ignore[arg-type]
    assert admin.described == []


def test_a_topic_whose_settings_differ_fails_the_plan_saying_how_to_fix_it() -> None:
    admin = FakeAdmin([{"retention.ms": "1000", "cleanup.policy": "delete"}])
    with pytest.raises(ConfigError) as failed:
        check_topic(admin, "jobs", "t", {"retention.ms": 7 * DAY_MS, "compression.type": "zstd"}, None)  # type: ignore[arg-type]
    assert str(failed.value) == (
        f"task t: Kafka topic 'jobs' differs from kafka.topic_config: retention.ms: the task says {WEEK_MS}, the topic "
        "has 1000; compression.type: the task says zstd, the topic has (not set). Nothing was produced. Change the "
        f"topic (kafka-configs.sh --alter --entity-type topics --entity-name jobs --add-config retention.ms={WEEK_MS} "
        "--add-config compression.type=zstd) or the task's kafka.topic_config"
    )


def test_dates_are_checked_only_when_messages_carry_them() -> None:
    short = FakeAdmin([{"retention.ms": "1000"}])
    check_topic(short, "jobs", "t", {"retention.ms": 1000}, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as failed:
        check_topic(short, "jobs", "t", {}, (7, NOW - timedelta(days=7), NOW))  # type: ignore[arg-type]
    assert str(failed.value) == (
        "task t: Kafka topic 'jobs' cannot keep messages stamped with their record's date (kafka.timestamp: "
        "record_date): retention.ms is 1000 (0.0 days), shorter than filter.days (7): messages stamped with their "
        "record's date would be deleted soon after they are published. Nothing was produced. Raise the topic's "
        "setting (kafka.topic_config for a topic crawler_ops creates), or set kafka.timestamp: produce_time"
    )


def test_a_topic_that_keeps_the_dates_passes_and_its_warnings_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin([{"retention.ms": WEEK_MS, "message.timestamp.type": "LogAppendTime"}])
    with caplog.at_level(logging.WARNING, logger="crawler_ops.hooks.kafka.topics"):
        check_topic(admin, "jobs", "t", {"retention.ms": 7 * DAY_MS}, (7, NOW - timedelta(days=7), NOW))  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records] == [
        "task t: Kafka topic 'jobs': message.timestamp.type is LogAppendTime: the broker stamps each message when it "
        "appends it"
    ]


def task_topics(admin: FakeAdmin, made: list[FakeAdmin], **kafka: Any) -> TaskTopics:
    def make() -> FakeAdmin:
        made.append(admin)
        return admin

    config = KafkaConfig(topic="t", **kafka)
    return TaskTopics(make, config, "t", 7, NOW - timedelta(days=7))  # type: ignore[arg-type]


def test_routed_topics_are_created_with_the_task_s_settings_in_order_by_one_admin_client() -> None:
    admin, made = FakeAdmin([{"retention.ms": WEEK_MS, "cleanup.policy": "delete"}]), []
    topics = task_topics(
        admin,
        made,
        topic_config={"retention.ms": 7 * DAY_MS, "cleanup.policy": "delete"},
        partitions=2,
        replication_factor=2,
    )
    topics({"jobs.sh", "jobs.bj"})
    settings = {"min.insync.replicas": "1", "retention.ms": WEEK_MS, "cleanup.policy": "delete"}
    assert admin.created == [("jobs.bj", 2, 2, settings), ("jobs.sh", 2, 2, settings)]
    assert [name for name, _ in admin.described] == ["jobs.bj", "jobs.sh"] and len(made) == 1


def test_a_missing_routed_topic_fails_when_the_task_may_not_create_it() -> None:
    admin = FakeAdmin([{}])
    with pytest.raises(
        DeliveryError, match=r"^task t: Kafka topic 'jobs\.bj' does not exist and kafka\.create_topic is false"
    ):
        task_topics(admin, [], create_topic=False)(["jobs.bj"])
    assert admin.created == []


def test_an_existing_routed_topic_is_checked_for_the_record_dates_only_when_messages_carry_them() -> None:
    existing = {"jobs.bj": [3, 3]}
    short = FakeAdmin([{"retention.ms": "1000"}], existing=dict(existing))
    with pytest.raises(
        ConfigError,
        match=r"^task t: Kafka topic 'jobs\.bj' cannot keep .*retention\.ms is 1000 .*shorter than filter\.days \(7\)",
    ):
        task_topics(short, [])(["jobs.bj"])
    produce_time = FakeAdmin([{"retention.ms": "1000"}], existing=dict(existing))
    task_topics(produce_time, [], timestamp="produce_time")(["jobs.bj"])
    assert produce_time.created == [] and produce_time.described == []


def test_a_topic_whose_settings_cannot_be_read_fails_naming_the_task() -> None:
    admin = FakeAdmin([KafkaException(KafkaError(KafkaError._TRANSPORT))])
    with pytest.raises(DeliveryError, match=r"^task t: cannot read the settings of Kafka topic 'jobs'"):
        check_topic(admin, "jobs", "t", {"retention.ms": 1000}, None)  # type: ignore[arg-type]


def test_every_reason_a_topic_cannot_keep_the_dates_is_named() -> None:
    admin = FakeAdmin([{"retention.ms": "1000", "message.timestamp.before.max.ms": "1000"}])
    with pytest.raises(ConfigError) as failed:
        check_topic(admin, "jobs", "t", {}, (7, NOW - timedelta(days=7), NOW))  # type: ignore[arg-type]
    assert "would refuse them; retention.ms is 1000 (0.0 days), shorter than" in str(failed.value)
