"""Unit tests of crawler_ops.operators.failures that need no DAG run: which errors fail a task without retries."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from crawler_ops.errors import ConfigError, DeliveryError, SourceError, StatusTableError
from crawler_ops.operators.failures import no_retry_for_permanent_errors


def raising(exc: Exception):
    def step() -> None:
        raise exc

    return step


@pytest.mark.parametrize(
    "exc",
    [
        SourceError("task t: GET /api/t/list answered HTTP 404", retriable=False),
        ConfigError("task t: transform 'x.y' cannot be imported"),
    ],
    ids=["source-4xx", "config"],
)
def test_permanent_errors_fail_the_task_without_retries(exc):
    with pytest.raises(AirflowFailException, match=str(exc)) as raised:
        no_retry_for_permanent_errors(raising(exc))

    assert raised.value.__cause__ is exc


@pytest.mark.parametrize(
    "exc",
    [
        SourceError("task t: GET /api/t/list answered HTTP 503", retriable=True),
        DeliveryError("task t: Kafka confirmed 0 of 3 messages"),
        StatusTableError("task t: PostgreSQL failed"),
    ],
    ids=["source-5xx", "kafka", "postgres"],
)
def test_other_errors_are_left_to_airflows_retries(exc):
    with pytest.raises(type(exc)) as raised:
        no_retry_for_permanent_errors(raising(exc))

    assert raised.value is exc


def test_a_step_that_succeeds_returns_its_value():
    assert no_retry_for_permanent_errors(lambda: [1, 2]) == [1, 2]
