"""Pure pieces of the executor: the function contract (dict and legacy styles), the lease book one worker's
two threads share, and the executor part of the config (defaults, styles, every category)."""

from __future__ import annotations

from typing import Any

import pytest

from crawler_ops.config import parse_config
from crawler_ops.executor.leases import LeaseBook, LeaseTimes
from crawler_ops.executor.udf import argument, call, judge
from crawler_ops.hooks.store.status_table import ClaimedRow

# --------------------------------------------------------------------------- the function contract


def old_udf(data):  # the old executor's sample function, unchanged
    print(data)
    return data[0][0], 1


@pytest.mark.parametrize(
    ("style", "expected"),
    [("dict", {"ID": 7, "PROVINCE": "广东省"}), ("legacy", [(7, "广东省")])],
    ids=["dict", "legacy"],
)
def test_each_style_passes_the_row_in_its_own_shape(style, expected):
    assert argument(style, ("ID", "PROVINCE"), (7, "广东省")) == expected


def test_an_old_function_runs_unchanged_in_the_legacy_style(capsys):
    assert call(old_udf, "legacy", ("ID", "PROVINCE"), (7, "广东省"), 7) is None
    assert capsys.readouterr().out.strip() == "[(7, '广东省')]"


def test_an_old_function_fails_every_row_in_the_dict_style():
    assert call(old_udf, "dict", ("ID", "PROVINCE"), (7, "广东省"), 7) == "KeyError: 0"


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ((7, 1), None),
        ([7, True], None),
        (("7", 1), None),
        ((7, 0), "function returned (7, 0)"),
        ((8, 1), "legacy function returned id 8 for row 7"),
        (None, "legacy function must return (id, status), returned None"),
        ("ok", "legacy function must return (id, status), returned 'ok'"),
        ((7, 1, 2), "legacy function must return (id, status), returned (7, 1, 2)"),
    ],
    ids=["ok", "list-ok", "id-as-text", "false-status", "other-id", "none", "text", "triple"],
)
def test_legacy_results_are_judged_by_their_status_and_id(result, error):
    assert judge("legacy", 7, result) == error


@pytest.mark.parametrize(
    ("result", "error"),
    [
        (None, None),
        ("anything", None),
        ((7, 1), None),
        (False, "function returned False"),
        ((7, 0), "function returned (7, 0)"),
    ],
    ids=["none", "value", "old-ok", "false", "old-false-status"],
)
def test_dict_results_fail_only_on_false_or_a_false_status(result, error):
    assert judge("dict", 7, result) == error


# --------------------------------------------------------------------------- the lease book


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rows(*ids: int) -> list[ClaimedRow]:
    return [ClaimedRow(i, True, (i,)) for i in ids]


def book(period: float = 60, claim_batch: int = 100) -> tuple[LeaseBook, Clock]:
    clock = Clock()
    return LeaseBook(LeaseTimes.for_period(period), claim_batch, clock), clock


def test_a_row_in_progress_is_due_for_renewal_after_a_third_of_the_period_and_again_after_renewing():
    lease, clock = book(period=60)
    lease.add(rows(1, 2), clock.now)
    assert lease.next_row(0) == rows(1)[0]

    clock.now += 19
    assert lease.due() == []
    clock.now += 2
    assert lease.due() == [1], "only the row in progress; row 2 has not started"
    assert lease.renewed([1], [1], clock.now) == []
    clock.now += 19
    assert lease.due() == []


def test_a_queued_row_not_started_within_half_the_period_is_given_back_and_never_started():
    lease, clock = book(period=60)
    lease.add(rows(1), clock.now)
    clock.now += 10
    lease.add(rows(2, 3), clock.now)

    clock.now += 21
    assert lease.stale() == [1]
    assert lease.next_row(0) == rows(2)[0]
    clock.now += 10
    assert lease.stale() == [3]
    assert not lease.queue


def test_the_runner_skips_rows_that_waited_too_long_and_hands_them_back():
    lease, clock = book(period=60)
    lease.add(rows(1, 2), clock.now)
    clock.now += 29
    lease.add(rows(3), clock.now)
    clock.now += 2

    assert lease.next_row(0) == rows(3)[0]
    assert lease.stale() == [1, 2]


def test_a_lost_lease_abandons_the_call_and_drops_outcomes_of_rows_taken_over():
    lease, clock = book(period=60)
    lease.add(rows(1, 2), clock.now)
    first = lease.next_row(0)
    assert first is not None and lease.finish(0, first, None)
    second = lease.next_row(0)
    assert second is not None

    clock.now += 25
    assert sorted(lease.due()) == [1, 2]
    assert lease.renewed([1, 2], [], clock.now) == [1, 2]

    assert lease.generation == 1, "the runner of row 2 is let go"
    assert lease.finish(0, second, None) is False
    assert len(lease.take_outcomes(force=True)) == 0, "row 1's outcome is not recorded: another worker has it"


def test_a_call_past_its_timeout_fails_as_timed_out_and_its_late_outcome_is_ignored():
    lease, clock = book(period=600)
    lease.add(rows(5), clock.now)
    row = lease.next_row(0)
    assert row is not None

    clock.now += 9
    assert lease.overdue(10) is None
    clock.now += 2
    assert lease.overdue(10) == row

    assert lease.finish(0, row, None) is False
    outcomes = lease.take_outcomes(force=True)
    assert outcomes.done == [] and outcomes.failed == {5: "timed out after 10s"}


def test_claims_start_small_and_grow_while_the_function_is_fast():
    lease, clock = book(period=600, claim_batch=100)
    sizes = []
    for batch in range(7):
        sizes.append(lease.claim_size())
        claimed = rows(*range(batch * 1000, batch * 1000 + sizes[-1]))
        lease.add(claimed, clock.now)
        for _ in claimed:
            row = lease.next_row(0)
            clock.now += 0.001
            assert row is not None and lease.finish(0, row, None)
    assert sizes == [1, 2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize(
    ("call_s", "period", "ahead"),
    [(0.0001, 600, 100), (0.005, 600, 40), (0.05, 600, 4), (6.0, 600, 0), (0.1, 0.4, 1)],
    ids=["fast", "5ms", "50ms", "6s", "short-lease"],
)
def test_a_worker_claims_ahead_only_what_starts_within_the_horizon(call_s, period, ahead):
    lease, _ = book(period=period, claim_batch=100)
    lease.pace.ramp = 100
    lease.pace.seconds = call_s

    assert lease.ahead() == ahead
    lease.waiting = True
    assert lease.claim_size() == max(1, ahead), "an idle runner always gets a row"


def test_outcomes_wait_for_a_batch_or_a_moment_then_are_recorded_together():
    lease, clock = book(period=600, claim_batch=3)
    lease.add(rows(1, 2, 3, 4), clock.now)
    for _ in range(2):
        row = lease.next_row(0)
        assert row is not None and lease.finish(0, row, None if row.id == 1 else "ValueError: x")

    assert len(lease.take_outcomes()) == 0
    clock.now += 0.2
    outcomes = lease.take_outcomes()
    assert outcomes.done == [1] and outcomes.failed == {2: "ValueError: x"}


# --------------------------------------------------------------------------- config


def executor_entry(**overrides: Any) -> dict[str, Any]:
    base = {
        "name": "areas",
        "source_table": "source_data_table",
        "status_table": "status_table",
        "output_fields": ["id"],
        "function": "pkg.mod.fn",
    }
    return {**base, **overrides}


def test_defaults_reach_executors_and_their_own_block_reaches_only_executors():
    document = {
        "defaults": {
            "postgres_conn_id": "warehouse",
            "retries": 5,
            "schedule": "@daily",
            "batch_size": 250,
            "executor": {"period": 120, "function_style": "legacy"},
        },
        "tasks": [{"id": "jobs", "kafka": {"topic": "jobs"}}],
        "executors": [executor_entry(), executor_entry(name="other", retries=1, period=30)],
    }

    loaded = parse_config(document, "tasks.yaml")

    assert dict(loaded.errors) == {} and dict(loaded.executor_errors) == {}
    areas, other = loaded.executors
    assert (areas.postgres_conn_id, areas.retries, areas.schedule) == ("warehouse", 5, "@daily")
    assert (areas.period, areas.function_style) == (120, "legacy")
    assert (other.retries, other.period) == (1, 30), "an executor's own keys win"
    assert loaded.tasks[0].batch_size == 250 and loaded.tasks[0].postgres_conn_id == "warehouse"


def test_a_defaults_executor_block_that_is_not_a_mapping_is_a_config_error():
    from crawler_ops.errors import ConfigError

    with pytest.raises(ConfigError, match=r"tasks.yaml: 'defaults.executor' must be a mapping"):
        parse_config({"defaults": {"executor": [1]}, "executors": [executor_entry()]}, "tasks.yaml")


@pytest.mark.parametrize(
    ("field", "value"),
    [("function_style", "tuple"), ("isolation", "container")],
    ids=["style", "isolation"],
)
def test_unknown_function_styles_and_isolations_are_rejected(field, value):
    loaded = parse_config({"executors": [executor_entry(**{field: value})]}, "tasks.yaml")

    assert loaded.executors == () and f"field '{field}'" in loaded.executor_errors["areas"]


def test_category_star_means_every_category():
    loaded = parse_config({"executors": [executor_entry(category="*"), executor_entry(name="b", category="A")]})

    assert [e.all_categories for e in loaded.executors] == [True, False]


def test_nothing_is_claimed_ahead_behind_a_call_that_is_taking_long():
    lease, clock = book(period=4, claim_batch=8)  # horizon 0.2 s
    lease.pace.ramp, lease.pace.seconds = 8, 0.001
    lease.add(rows(1), clock.now)
    assert lease.next_row(0) is not None
    assert lease.claim_size() == 8

    clock.now += 0.05
    assert lease.claim_size() == 4
    clock.now += 0.5
    assert lease.claim_size() == 0, "rows claimed now would wait behind the call, locked away from other workers"


# --------------------------------------------------------------------------- the status view


def status_report() -> dict[str, Any]:
    parked = [{"id": 7, "attempts": 3, "last_error": "ValueError: <bad> row", "failed_at": "2026-12-01T00:00:00+00:00"}]
    return {
        "generated_at": "2026-12-01T00:00:01+00:00",
        "tasks": [],
        "invalid_tasks": [],
        "executors": [
            {
                "name": "areas",
                "dag_id": "exec_areas",
                "status_table": "public.status_table_case",
                "rows": {"pending": 5, "claimed": 0, "done": 10, "parked": 1},
                "parked": parked,
            },
            {"name": "gone", "dag_id": "exec_gone", "status_table": "public.gone", "db_error": "StatusTableError: x"},
        ],
        "invalid_executors": [{"name": "bad", "error": "field 'period': must be >= 1"}],
    }


def test_the_status_text_lists_each_executor_with_its_parked_rows_and_how_to_unpark_them():
    from crawler_ops.__main__ import render_text

    text = render_text(status_report())

    assert "executor areas  dag exec_areas  status table public.status_table_case" in text
    assert "  rows pending 5  claimed 0  done 10  parked 1" in text
    assert "  parked row 7 after 3 attempts at 2026-12-01T00:00:00+00:00: ValueError: <bad> row" in text
    assert "crawler-ops unpark --executor areas" in text
    assert "  db error: StatusTableError: x" in text and "executor bad: INVALID CONFIG" in text


def test_the_status_page_has_an_executors_table_with_parked_rows_escaped():
    from crawler_ops.ops.web import render_html

    page = render_html(status_report())

    assert "<h3>Executors</h3>" in page and "exec_areas" in page
    assert "7 (3 attempts, 2026-12-01T00:00:00+00:00): ValueError: &lt;bad&gt; row" in page
    assert "<bad>" not in page and "executor bad</b>" in page
