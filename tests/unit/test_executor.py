"""Unit tests of crawler_ops.executor that need no database: loading the user function, the call contract and its
timeout."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.errors import ConfigError
from crawler_ops.executor import ExecutorWorker, call_succeeded, load_function

RELEASE = threading.Event()


def blocks_until_released(row: dict[str, Any]) -> None:
    RELEASE.wait(60)


def raises(row: dict[str, Any]) -> None:
    raise ValueError(f"row {row['id']} is bad")


def executor(function: str, **overrides: Any) -> ExecutorTaskConfig:
    return ExecutorTaskConfig(
        name="ex",
        source_table="src",
        status_table="st",
        output_fields=("id",),
        function=function,
        **overrides,
    )


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("tests.no_such_module.fn", r"executor 'ex': function 'tests.no_such_module.fn' cannot be imported"),
        ("crawler_ops.samples.no_such_fn", r"function 'crawler_ops.samples.no_such_fn' cannot be imported"),
        ("crawler_ops.executor.PROGRESS_EVERY_S", r"function 'crawler_ops.executor.PROGRESS_EVERY_S' is not callable"),
    ],
    ids=["no-module", "no-attribute", "not-callable"],
)
def test_a_function_that_cannot_be_used_is_a_config_error_naming_it(function, message):
    with pytest.raises(ConfigError, match=message):
        load_function(executor(function))


@pytest.mark.parametrize(
    ("result", "succeeded"),
    [(None, True), (True, True), ({"ok": 1}, True), (False, False), ((7, 0), False), ((7, 1), True), ((7, 0, 1), True)],
    ids=["none", "true", "value", "false", "old-failure", "old-success", "other-tuple"],
)
def test_false_or_an_old_style_false_status_is_a_failure(result, succeeded):
    assert call_succeeded(result) is succeeded


@pytest.fixture
def worker() -> Iterator[ExecutorWorker]:
    RELEASE.clear()
    made = ExecutorWorker(
        executor(f"{__name__}.blocks_until_released", timeout_s=0.2),
        "run|w0",
        quota=10,
        hook=object(),  # type: ignore[arg-type]
    )
    yield made
    RELEASE.set()
    made._pool.shutdown(wait=False)


def test_a_call_that_outlives_timeout_s_is_a_failure_and_the_next_call_gets_a_fresh_thread(worker, monkeypatch):
    assert worker.call({"id": 1}) == "timed out after 0.2s"

    monkeypatch.setattr(worker, "function", raises)
    assert worker.call({"id": 2}) == "ValueError: row 2 is bad", "not queued behind the stuck call"
    monkeypatch.setattr(worker, "function", lambda row: (row["id"], 0))
    assert worker.call({"id": 3}) == "function returned (3, 0)"
