"""Unit tests of the topic checks made when a run is planned: settings drift, and whether a topic keeps and accepts
messages stamped with their record's date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from crawler_ops.hooks.topics import DAY_MS, config_drift, date_problems, setting_text

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
