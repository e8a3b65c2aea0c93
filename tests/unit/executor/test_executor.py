"""Unit tests of crawler_ops.executor that need no database: loading the user function, the call contract and its
timeout."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.errors import ConfigError
from crawler_ops.executor import load_function
from crawler_ops.executor.calls import ThreadCaller, run_calls
from crawler_ops.executor.leases import LeaseBook, LeaseTimes
from crawler_ops.executor.udf import judge
from crawler_ops.hooks.store.status_table import ClaimedRow
from tests.waiting import wait_until

RELEASE = threading.Event()


def blocks_until_released(row: dict[str, Any]) -> None:
    RELEASE.wait(60)


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
        (
            "crawler_ops.executor.worker.PROGRESS_EVERY_S",
            r"function 'crawler_ops.executor.worker.PROGRESS_EVERY_S' is not callable",
        ),
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
    assert (judge("dict", 7, result) is None) is succeeded


def raises_then_refuses(row: dict[str, Any]) -> Any:
    if row["id"] == 2:
        raise ValueError(f"row {row['id']} is bad")
    return row["id"], 0


def test_a_call_that_outlives_timeout_s_is_a_failure_and_the_next_call_gets_a_fresh_thread():
    RELEASE.clear()
    now = [1000.0]
    book = LeaseBook(LeaseTimes.for_period(600), claim_batch=10, clock=lambda: now[0])
    book.add([ClaimedRow(i, True, (i,)) for i in (1, 2, 3)], now[0])
    stuck = threading.Thread(
        target=run_calls, args=(book, 0, ThreadCaller(blocks_until_released, "dict", ("id",))), daemon=True
    )
    stuck.start()
    try:
        wait_until(lambda: book.running is not None, 30, "the first call to start")
        now[0] += 0.1
        assert book.overdue(0.2) is None, "not overdue before timeout_s"
        now[0] += 0.1
        assert book.overdue(0.2) == ClaimedRow(1, True, (1,))

        fresh = ThreadCaller(raises_then_refuses, "dict", ("id",))
        threading.Thread(target=run_calls, args=(book, book.generation, fresh), daemon=True).start()
        wait_until(lambda: len(book.outcomes) >= 3, 30, "the other rows' calls, not queued behind the stuck one")
    finally:
        RELEASE.set()
    stuck.join(10)
    assert not stuck.is_alive() and book.outcomes.done == [], "the stuck call's late return is not recorded"
    assert book.take_outcomes(force=True).failed == {
        1: "timed out after 0.2s",
        2: "ValueError: row 2 is bad",
        3: "function returned (3, 0)",
    }
