"""The fleet benchmark's arithmetic, without services: the cron ticks it counts in its window, the nearest-rank
percentiles of start lag and duration, the targets it reports met or not, and a watched fleet's figures: polls due
and made, the change lag that matches each append to the first plan that counted it, the changes the watches
announced, CPU per poll, and the machine's CPU busy share from two readings of /proc/stat."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlbench.fleet.fleet import Append, Schedule
from crawlbench.fleet.machine import CpuStat, busy_share, parse_cpu_stat
from crawlbench.fleet.report import targets
from crawlbench.fleet.runs import fire_times, percentile
from crawlbench.fleet.watch import (
    Announcement,
    Plan,
    Reading,
    change_lags,
    changes,
    lag_figures,
    plans_between,
    poll_cpu,
    poll_figures,
    polls_due,
    polls_made,
)

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


def result(runs_created: int, lag_p95: float, left: int, exact: bool, ratio: float, busy: float) -> dict:
    main = {
        "ticks_due": 700,
        "runs_created": runs_created,
        "scheduled_created": runs_created,
        "served": runs_created / 700,
        "start_lag_bound_s": {"p95": lag_p95},
        "never_started": 0,
        "left_active": left,
        "window": {"machine_busy": busy},
    }
    return {"main": main, "topic": {"summary": "exact", "exact": exact}, "cpu": {"idle_vs_old_count": ratio}}


def test_each_target_is_met_only_at_its_goal():
    assert [t.met for t in targets(result(700, 30.0, 0, True, 10.0, 0.5))] == [True] * 6
    assert [t.met for t in targets(result(699, 30.1, 1, False, 10.1, 0.501))] == [False] * 6


def watched_result(made: int, due: float, ratio: float, left: int, exact: bool, busy: float) -> dict:
    main = {
        "left_active": left,
        "window": {"machine_busy": busy},
        "watch": {"made": made, "due": due, "on_time": made / due, "triggerer_vs_old": 1e6},
    }
    idle = {"watch": {"made": 1, "due": 1, "on_time": 1.0, "triggerer_vs_old": ratio}}
    return {"main": main, "idle": idle, "topic": {"summary": "exact", "exact": exact}, "cpu": {}}


def test_a_watched_fleets_targets_are_its_polls_its_cpu_per_idle_poll_and_the_common_ones():
    met = targets(watched_result(990, 1000, 10.0, 0, True, 0.5))
    assert [t.met for t in met] == [True] * 5
    assert "idle phase" in met[1].name, "the CPU per poll is the idle phase's when there is one"
    assert [t.met for t in targets(watched_result(989, 1000, 10.1, 1, False, 0.51))] == [False] * 5


def test_a_watch_asks_again_after_four_periods_and_ten_minutes_at_the_least():
    assert Schedule(None, 20).watch == {"every_s": 20, "refire_s": 600.0}
    assert Schedule("*/2 * * * *", 300).watch == {"every_s": 300, "refire_s": 1200.0}
    assert Schedule("*/2 * * * *").watch is None


# --- polls


def test_twenty_tasks_watched_every_twenty_seconds_are_due_one_hundred_eighty_polls_in_three_minutes():
    assert polls_due(20, 180, 20) == 180


@given(
    st.integers(1, 500),
    st.floats(min_value=1, max_value=1e5, allow_nan=False),
    st.floats(min_value=5, max_value=86_400, allow_nan=False),
)
def test_polls_due_are_one_per_task_and_period(tasks, seconds, every_s):
    assert polls_due(tasks, seconds, every_s) == pytest.approx(tasks * (seconds / every_s))
    assert polls_due(tasks, 2 * seconds, every_s) == pytest.approx(2 * polls_due(tasks, seconds, every_s))


counter = st.tuples(st.integers(0, 10**6), st.integers(0, 500))


@given(st.dictionaries(st.sampled_from([f"t{i}" for i in range(8)]), counter), st.integers(0, 100))
def test_polls_made_are_the_count_requests_answered_between_two_readings_less_the_plans_own(counters, plans):
    before = {name: start for name, (start, _) in counters.items()}
    after = {name: start + added for name, (start, added) in counters.items()}
    made = polls_made(before, after, plans)
    assert made + plans == sum(added for _, added in counters.values())


def test_a_data_set_first_seen_at_the_second_reading_counts_all_its_requests():
    assert polls_made({"a": 5}, {"a": 7, "b": 3}, plans=1) == 4


def test_plans_are_counted_in_a_half_open_window():
    plans = [Plan("a", "r1", 10.0, 5, 1), Plan("a", "r2", 20.0, 6, 1), Plan("b", "r3", 15.0, None, 0)]
    assert plans_between(plans, 10.0, 20.0) == 2
    assert plans_between(plans, 10.0, 20.000001) == 3


def reading(at: float, counts: dict[str, int], triggerer: float, airflow: float) -> Reading:
    return Reading(at, airflow, triggerer, CpuStat(0, 0), counts)


def test_poll_figures_and_cpu_per_poll_come_from_the_two_readings():
    before = reading(1000.0, {"a": 10, "b": 10}, triggerer=5.0, airflow=50.0)
    after = reading(1180.0, {"a": 20, "b": 19}, triggerer=5.9, airflow=68.0)
    plans = [Plan("a", "r1", 999.0, 1, 0), Plan("a", "r2", 1100.0, 2, 1)]  # the first before the window
    polls = poll_figures(before, after, plans, tasks=2, every_s=20)
    assert (polls["due"], polls["made"], polls["plan_counts"]) == (18, 18, 1)
    assert polls["on_time"] == 1.0
    cpu = poll_cpu(polls, old_cpu_s=0.0005, triggerer_quiet_per_s=0.003)
    assert cpu["triggerer_per_poll_s"] == pytest.approx(0.9 / 18)
    assert cpu["triggerer_vs_old"] == pytest.approx(0.9 / 18 / 0.0005)
    assert cpu["triggerer_marginal_per_poll_s"] == pytest.approx((0.9 - 0.003 * 180) / 18)
    assert cpu["airflow_per_poll_s"] == pytest.approx(1.0)
    assert poll_cpu({**polls, "made": 0}, 0.0005, None)["triggerer_per_poll_s"] is None


# --- change lag


def test_an_append_is_crawled_by_the_first_plan_after_it_that_counted_its_total():
    appends = [Append(100.0, "a", 10, 310), Append(100.0, "b", 5, 305), Append(200.0, "a", 7, 317)]
    plans = [
        Plan("a", "before", 99.0, 310, 1),  # counted the total before the append: not this one's
        Plan("a", "counted-before", 105.0, 300, 0),  # recorded after it, but its count was taken before
        Plan("b", "b's", 101.0, 305, 1),  # another task's plan: b's change only
        Plan("a", "covers", 112.0, 310, 1),
        Plan("a", "later", 130.0, 310, 0),
    ]
    assert change_lags(appends, plans) == [12.0, 1.0, None]


@st.composite
def plans_and_appends(draw):
    tasks = ["a", "b", "c"]
    plans = [
        Plan(draw(st.sampled_from(tasks)), f"r{i}", draw(st.floats(0, 1000)), draw(st.none() | st.integers(0, 50)), 1)
        for i in range(draw(st.integers(0, 30)))
    ]
    appends = [
        Append(draw(st.floats(0, 1000)), draw(st.sampled_from(tasks)), 1, draw(st.integers(1, 50)))
        for _ in range(draw(st.integers(0, 20)))
    ]
    return plans, appends


@given(plans_and_appends())
def test_a_change_lag_is_the_time_to_the_first_covering_plan_of_its_task_and_none_when_there_is_none(drawn):
    plans, appends = drawn
    lags = change_lags(appends, plans)
    assert len(lags) == len(appends)
    for change, lag in zip(appends, lags, strict=True):
        mine = [p for p in plans if p.task == change.task]
        covering = [p.started for p in mine if p.started >= change.at and (p.total or 0) >= change.total]
        if lag is None:
            assert not covering
        else:
            assert lag >= 0
            assert lag == min(covering) - change.at


def test_lag_figures_count_an_append_never_crawled_as_not_within_the_bound():
    figures = lag_figures([5.0, 40.0, 55.0, None], within_s=50.0)
    assert (figures["appends"], figures["crawled"], figures["not_crawled"]) == (4, 3, 1)
    assert figures["within_share"] == 0.5
    assert figures["lag_s"]["max"] == 55.0
    assert lag_figures([5.0], within_s=None)["within_share"] is None


def test_each_distinct_total_a_watch_announced_in_the_window_is_one_change_and_an_announcement_again_a_repeat():
    announced = [
        Announcement("a", 310, 99.0),  # before the window
        Announcement("a", 320, 100.0),
        Announcement("a", 320, 150.0),  # the same total again: a refire
        Announcement("a", 335, 160.0),
        Announcement("b", 320, 170.0),  # another task's same total is its own change
        Announcement("b", 340, 200.0),  # at the window's end: out
    ]
    assert changes(announced, 100.0, 200.0) == {"announced": 4, "changes": 3, "repeats": 1}


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5), st.floats(0, 1000)), max_size=40),
    st.floats(0, 1000),
    st.floats(0, 1000),
)
def test_changes_are_at_most_the_announcements_in_the_window_and_the_rest_are_repeats(raw, one, other):
    start, end = min(one, other), max(one, other)
    announced = [Announcement(task, total, at) for task, total, at in raw]
    seen = changes(announced, start, end)
    inside = [(task, total) for task, total, at in raw if start <= at < end]
    assert seen["announced"] == len(inside)
    assert seen["changes"] == len(set(inside)) <= len(inside)
    assert seen["changes"] + seen["repeats"] == seen["announced"]


# --- the machine's CPU


STAT = """cpu  2964674 760 499012 1832854 8590 0 24482 1325 700 0
cpu0 1394519 357 244176 1011915 2026 0 10868 635 0 0
intr 1 2 3
"""


def test_the_cpu_line_of_proc_stat_is_busy_and_total_ticks_with_guest_time_not_counted_twice():
    stat = parse_cpu_stat(STAT)
    busy = 2964674 + 760 + 499012 + 0 + 24482 + 1325
    assert stat == CpuStat(busy, busy + 1832854 + 8590)


ticks = st.integers(0, 10**6)


@given(st.tuples(*[ticks] * 8), st.tuples(*[ticks] * 8), st.tuples(ticks, ticks))
def test_the_busy_share_between_two_readings_is_the_busy_ticks_over_all_ticks(start, added, guest):
    fields = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    before = dict(zip(fields, start, strict=True))
    after = {name: before[name] + n for name, n in zip(fields, added, strict=True)}

    def text(counters: dict[str, int], guests: tuple[int, int]) -> str:
        return "cpu  " + " ".join(str(counters[f]) for f in fields) + f" {guests[0]} {guests[1]}\n"

    share = busy_share(parse_cpu_stat(text(before, (0, 0))), parse_cpu_stat(text(after, guest)))
    busy = sum(added[fields.index(f)] for f in ("user", "nice", "system", "irq", "softirq", "steal"))
    total = busy + added[fields.index("idle")] + added[fields.index("iowait")]
    if total == 0:
        assert share is None
    else:
        assert share is not None
        assert share == pytest.approx(busy / total)
        assert 0 <= share <= 1


def test_a_machine_only_idle_is_not_busy_and_one_never_idle_is_fully_busy():
    base = CpuStat(busy=100, total=300)
    assert busy_share(base, CpuStat(100, 400)) == 0
    assert busy_share(base, CpuStat(200, 400)) == 1
