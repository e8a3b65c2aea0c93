"""The fleet benchmark's arithmetic, without services: the cron ticks it counts in its window, the nearest-rank
percentiles of start lag and duration, and the targets it reports met or not."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from crawlbench.fleet.report import targets
from crawlbench.fleet.runs import fire_times, percentile

T0 = datetime(2026, 12, 7, 10, 0, 30, tzinfo=UTC).timestamp()


def test_a_two_minute_cron_has_seven_ticks_in_fourteen_minutes_counted_from_the_first_after_t0():
    ticks = fire_times("*/2 * * * *", T0, T0 + 14 * 60)
    assert len(ticks) == 7
    assert ticks[0] == datetime(2026, 12, 7, 10, 2, tzinfo=UTC).timestamp()
    assert fire_times("*/2 * * * *", ticks[0], ticks[0] + 1) == [ticks[0]], "a tick at the window's start is in it"
    assert fire_times("*/2 * * * *", T0, ticks[0]) == [], "the window's end is out of it"


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=200))
def test_a_percentile_is_one_of_the_values_with_at_least_that_share_at_or_below_it(values):
    for q in (0.5, 0.95, 1.0):
        p = percentile(values, q)
        assert p in values
        assert sum(v <= p for v in values) >= q * len(values)
        assert sum(v < p for v in values) < q * len(values)


def result(runs_created: int, lag_p95: float, left: int, exact: bool, ratio: float) -> dict:
    main = {
        "ticks_due": 700,
        "runs_created": runs_created,
        "served": runs_created / 700,
        "start_lag_bound_s": {"p95": lag_p95},
        "never_started": 0,
        "left_active": left,
    }
    return {"main": main, "topic": {"summary": "exact", "exact": exact}, "cpu": {"idle_vs_old_count": ratio}}


def test_each_target_is_met_only_at_its_goal():
    assert [t.met for t in targets(result(700, 30.0, 0, True, 10.0))] == [True] * 5
    assert [t.met for t in targets(result(699, 30.1, 1, False, 10.1))] == [False] * 5
