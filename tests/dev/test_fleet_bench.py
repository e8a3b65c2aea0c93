"""The fleet benchmark's arithmetic, without services: the cron ticks it counts in its window, the nearest-rank
percentiles of start lag and duration, the targets it reports met or not, and a watched fleet's figures: polls due
and made, the watches that asked once (a caught-up fleet's warm-up), the change lag that matches each append to the
first plan that counted it, the changes the watches announced, CPU per poll, the machine's CPU busy share from two
readings of /proc/stat, and the keys each topic must hold, from empty or from an imported watermark."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlbench.common import BenchError
from crawlbench.fleet import topics
from crawlbench.fleet.fleet import Append, Schedule
from crawlbench.fleet.machine import CpuStat, busy_share, parse_cpu_stat
from crawlbench.fleet.report import targets
from crawlbench.fleet.runs import fire_times, percentile
from crawlbench.fleet.topics import RunRecord, compare, crawled_from, expected_and_tail, received_keys
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
    tasks_asked,
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


def test_a_watch_has_asked_once_when_its_count_requests_grew_by_more_than_its_plans_since_the_first_reading():
    before = {"a": 10, "b": 10, "c": 10, "d": 10}
    after = {"a": 11, "b": 11, "c": 12, "d": 10, "e": 1}
    plans = [
        Plan("b", "r1", 105.0, 310, 1),  # b's one request was its plan's count: its watch has not asked
        Plan("c", "r2", 105.0, 310, 1),  # c: one plan, two requests
        Plan("a", "r0", 99.0, 300, 0),  # before the first reading: a's request was its watch's
    ]
    assert tasks_asked(before, after, plans, since=100.0) == {"a", "c", "e"}


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


# --- topics: the keys each task's topic must hold


REF = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def ids_at(start: int, end: int) -> set[str]:
    """The demo source's ids by offset, as the checker reads them from its pages."""
    return {f"r{i}" for i in range(start, end)}


def no_truth(ref: datetime) -> frozenset[str]:
    raise AssertionError("a caught-up task's expected keys come from the source's pages, not from its truth")


def record(mode: str, status: str, total: int | None, watermark: int | None, at: float) -> RunRecord:
    """A run record that started at ``at`` and finished a second later (its reference ``at`` minutes after REF)."""
    return RunRecord(mode, status, total, watermark, REF + timedelta(minutes=at), at, at + 1.0)


IMPORT = record("import", "success", 300, 300, 0.0)


def test_a_task_never_crawled_after_its_import_expects_nothing_and_every_record_since_is_its_tail():
    crawled = crawled_from([IMPORT])
    assert (crawled.total, crawled.imported, crawled.crawled) == (300, 300, False)
    expected, tail = expected_and_tail(crawled, 312, ids_at, no_truth)
    assert expected == set()
    assert tail == ids_at(300, 312)
    check = compare(expected, tail, Counter(), crawled)  # a topic never created reads as empty
    assert check.exact
    assert (check.expected, check.tail, check.no_success, check.imported) == (0, 12, 1, 1)


def test_a_caught_up_task_expects_the_records_from_its_imported_watermark_to_its_last_successful_total():
    records = [
        record("incremental", "success", 318, 318, 20.0),  # the last to finish: T = 318
        IMPORT,
        record("incremental", "success", 310, 310, 10.0),
        record("incremental", "failed", 325, None, 30.0),  # counted more, but failed: promised nothing
    ]
    crawled = crawled_from(records)
    assert (crawled.total, crawled.imported, crawled.crawled) == (318, 300, True)
    expected, tail = expected_and_tail(crawled, 325, ids_at, no_truth)
    assert expected == ids_at(300, 318)
    assert tail == ids_at(318, 325)

    exact = Counter(expected | {"r320"})  # a tail record published by the failed run
    check = compare(expected, tail, exact, crawled)
    assert check.exact
    assert (check.expected, check.ahead, check.tail) == (18, 1, 7)

    below = compare(expected, tail, exact + Counter({"r299": 1}), crawled)  # the old service's, not this topic's
    assert (below.exact, below.extra) == (False, 1)
    missing = compare(expected, tail, exact - Counter({"r305": 1}), crawled)
    assert (missing.exact, missing.missing) == (False, 1)
    twice = compare(expected, tail, exact + Counter({"r305": 1}), crawled)
    assert (twice.exact, twice.duplicates) == (False, 1)


def test_the_watermark_imported_is_the_one_the_expected_records_start_from_not_the_total():
    crawled = crawled_from([record("import", "success", 300, 280, 0.0), record("incremental", "success", 305, 305, 5)])
    assert expected_and_tail(crawled, 305, ids_at, no_truth) == (ids_at(280, 305), set())


def test_a_task_that_started_from_empty_expects_the_truths_of_its_first_and_last_success_less_the_tail():
    truths = {
        REF + timedelta(minutes=1): frozenset({"a", "b", "r300"}),
        REF + timedelta(minutes=3): frozenset({"z"}),  # neither the first nor the last success
        REF + timedelta(minutes=5): frozenset({"c", "r301"}),
    }
    records = [
        record("first", "success", 300, 300, 1.0),
        record("incremental", "success", 300, 300, 3.0),
        record("incremental", "success", 301, 301, 5.0),
        record("incremental", "failed", 303, None, 7.0),
    ]
    crawled = crawled_from(records)
    assert (crawled.total, crawled.imported, crawled.crawled) == (301, None, True)
    expected, tail = expected_and_tail(crawled, 303, ids_at, lambda ref: truths.get(ref, frozenset()))
    assert tail == {"r301", "r302"}
    assert expected == {"a", "b", "r300", "c"}


def test_a_task_with_no_record_expects_nothing_and_everything_is_its_tail():
    crawled = crawled_from([])
    assert (crawled.total, crawled.imported, crawled.crawled) == (0, None, False)
    assert expected_and_tail(crawled, 3, ids_at, lambda ref: frozenset({"x"})) == (set(), ids_at(0, 3))


@given(
    st.integers(0, 400),
    st.lists(st.tuples(st.integers(0, 60), st.sampled_from(["success", "failed", "running"])), max_size=8),
    st.integers(0, 30),
)
def test_a_caught_up_tasks_expected_records_and_tail_split_what_came_after_its_import(w0, crawls, ahead):
    """Whatever crawls followed the import, the expected records are [W0, T) with T the last successful total, and
    with the tail they are every record from W0 to the current total."""
    records = [record("import", "success", w0, w0, 0.0)]
    records += [record("incremental", status, w0 + grew, None, 1.0 + i) for i, (grew, status) in enumerate(crawls)]
    successes = [w0 + grew for grew, status in crawls if status == "success"]
    last = successes[-1] if successes else w0
    current = max([last, *(w0 + grew for grew, _ in crawls)]) + ahead
    crawled = crawled_from(records)
    expected, tail = expected_and_tail(crawled, current, ids_at, no_truth)
    assert expected == ids_at(w0, last)
    assert not expected & tail
    assert expected | tail == ids_at(w0, current)
    assert compare(expected, tail, Counter(expected), crawled).exact
    if w0 > 0:
        assert not compare(expected, tail, Counter(expected | {f"r{w0 - 1}"}), crawled).exact


def test_a_topic_that_was_never_created_reads_as_empty_and_other_errors_are_raised(monkeypatch):
    def missing(bootstrap: str, topic: str) -> Counter[str]:
        raise BenchError(f"topic {topic} does not exist")

    monkeypatch.setattr(topics, "topic_keys", missing)
    assert received_keys("broker:9092", "bench.000") == Counter()

    def down(bootstrap: str, topic: str) -> Counter[str]:
        raise BenchError(f"topic {topic}: no message within 30s")

    monkeypatch.setattr(topics, "topic_keys", down)
    with pytest.raises(BenchError, match="no message"):
        received_keys("broker:9092", "bench.000")
