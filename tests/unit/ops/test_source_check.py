"""The judgements of ``crawler-ops check`` over fetched bodies (crawler_ops.ops.source_check), without services."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.crawl.ranges import probe_offset
from crawler_ops.message.dates import date_format, parse_date
from crawler_ops.message.filtering import DateRule, Window
from crawler_ops.ops.check_text import render_text
from crawler_ops.ops.source_check import (
    NO,
    UNKNOWN,
    YES,
    Dated,
    Rate,
    batches_between,
    date_report,
    disorder,
    exit_code,
    first_crawl_estimate,
    key_report,
    order_verdict,
    problems,
    record_lists,
    records_at,
    window_records,
    window_search,
)
from crawler_ops.planning import iter_plan

BASE = datetime(2026, 11, 1, tzinfo=UTC)


def dated(dates: list[int], first: int = 0) -> list[Dated]:
    """Records at offsets ``first, first + 1, ...`` dated ``BASE + seconds``."""
    return [Dated(first + i, BASE + timedelta(seconds=s)) for i, s in enumerate(dates)]


# ------------------------------------------------------------------ records path


def test_records_at_follows_objects_only() -> None:
    body = {"data": {"items": [{"a": 1}], "n": 3}, "list": [[1]]}
    assert records_at(body, "data.items") == [{"a": 1}]
    assert records_at(body, "data.n") is None
    assert records_at(body, "data.data") is None
    assert records_at([{"a": 1}], "data") is None


def test_record_lists_suggests_the_lists_of_objects_largest_first() -> None:
    body = {
        "code": 0,
        "meta": {"links": [{"rel": "next"}]},
        "result": {"page": {"items": [{"id": 1}, {"id": 2}, {"id": 3}]}, "tags": ["a", "b", "c", "d"]},
        "empty": [],
    }
    assert record_lists(body) == [
        {"path": "result.page.items", "records": 3},
        {"path": "meta.links", "records": 1},
    ]
    assert record_lists({"data": {"total": 3}}) == []
    assert record_lists([{"id": 1}, {"id": 2}]) == [{"path": "", "records": 2}], "a bare list: the body itself"
    assert record_lists([1, 2]) == []


# ------------------------------------------------------------------ keys


def test_key_report_counts_missing_and_repeated_keys() -> None:
    records = [{"id": "a"}, {"id": "b"}, {"id": ""}, {"x": 1}, {"id": "a"}]
    assert key_report(records, "id") == {
        "field": "id",
        "records": 5,
        "present": 3,
        "missing": 2,
        "unique": False,
        "repeated": ["a"],
    }
    assert key_report(records[:2], "id")["unique"] is True
    assert key_report(records, None)["field"] is None


# ------------------------------------------------------------------ dates


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-20", "ISO 8601 date, local time"),
        ("2026/11/20 10:11:12", "ISO 8601 date-time, local time"),
        ("2026-11-20T10:11:12.250Z", "ISO 8601 date-time, with offset"),
        (1795140672, "epoch seconds (number)"),
        (1795140672123, "epoch milliseconds (number)"),
        ("1795140672.5", "epoch seconds (text)"),
        ("1795140672123", "epoch milliseconds (text)"),
        ("20261120", "compact date (YYYYMMDD)"),
        ("20261120101112", "compact date-time (YYYYMMDDhhmmss)"),
        ("2026.1.5 10:11", "dotted or single-digit date"),
        ("2026年11月20日 10:11:12", "Chinese date"),
        ("20 Nov 2026", None),
        ("", None),
        (True, None),
        (None, None),
        ({"d": 1}, None),
    ],
)
def test_date_format_names_the_format_that_reads_a_value(value: Any, expected: str | None) -> None:
    assert date_format(value) == expected


@settings(max_examples=300)
@given(st.one_of(st.text(max_size=25), st.integers(), st.floats(allow_nan=False), st.from_regex(r"\d{6,15}")))
def test_a_value_has_a_format_exactly_when_the_filter_reads_it(value: Any) -> None:
    assert (date_format(value) is None) == (parse_date(value, UTC) is None)


def test_date_report_counts_formats_and_the_window() -> None:
    window = Window(BASE, BASE + timedelta(days=10))
    records = [
        {"d": "2026-11-02 10:00:00"},
        {"d": "2026-10-01"},  # older
        {"d": "yesterday", "e": 1793577600},  # the fallback field dates it (2026-11-01T00:00Z)
        {"e": "never"},
        {"d": "2027-01-01"},  # after the window
    ]
    report = date_report(records, ("d", "e"), UTC, window)
    assert report["fields"][0] == {
        "field": "d",
        "present": 4,
        "parsed": 3,
        "formats": {"ISO 8601 date, local time": 2, "ISO 8601 date-time, local time": 1},
        "unparsed": 1,
        "unparsed_examples": ["yesterday"],
    }
    assert report["fields"][1]["formats"] == {"epoch seconds (number)": 1}
    assert (report["dated"], report["undated"]) == (4, 1)
    assert (report["in_window"], report["older"], report["after_window"]) == (2, 1, 1)


# ------------------------------------------------------------------ order


@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=50).filter(lambda d: len(set(d)) > 1))
def test_dates_sorted_by_offset_are_in_the_crawls_order_and_reversed_they_are_not(dates: list[int]) -> None:
    assert order_verdict(dated(sorted(dates)))["verdict"] == YES
    assert order_verdict(dated(sorted(dates, reverse=True)))["verdict"] == NO


@given(st.lists(st.integers(0, 1000), min_size=3, max_size=40), st.integers(0, 39))
def test_one_late_record_does_not_turn_a_growing_source_around(dates: list[int], where: int) -> None:
    """Roughly in time order is enough: one record out of place among rising dates is still "yes"."""
    ordered = [i * 10 for i in range(len(dates))]
    where %= len(ordered) - 1
    ordered[where], ordered[where + 1] = ordered[where + 1], ordered[where]
    if where == 0 and len(ordered) == 2:
        return
    assert order_verdict(dated(ordered))["verdict"] == YES


def test_order_is_unknown_without_two_different_dates() -> None:
    assert order_verdict([])["verdict"] == UNKNOWN
    assert order_verdict(dated([5]))["verdict"] == UNKNOWN
    assert order_verdict(dated([5, 5, 5]))["verdict"] == UNKNOWN


def test_an_old_first_record_against_a_page_newest_first_is_no() -> None:
    """The oldest record (offset 0) is newer than the newest page: the source serves newest first."""
    page = dated([100, 90, 80, 70], first=996)
    verdict = order_verdict([Dated(0, BASE + timedelta(seconds=10**6)), *page])
    assert verdict["verdict"] == NO
    assert verdict["evidence"]["lowest"]["offset"] == 0


# ------------------------------------------------------------------ window and estimate


def test_the_window_count_is_exact_when_the_page_holds_its_start() -> None:
    page = dated(list(range(0, 1000, 10)), first=900)  # offsets 900..999, dates 0..990 s
    start = BASE + timedelta(seconds=495)  # first record from 500 s: offset 950
    assert window_records(1000, page, start) == (50, 50)


def test_every_record_is_in_the_window_when_the_oldest_is() -> None:
    assert window_records(5000, [Dated(0, BASE), *dated([10, 20], first=4998)], BASE) == (5000, 5000)


@given(
    total=st.integers(200, 10**7),
    per_second=st.floats(0.01, 100),
    days=st.floats(0.1, 30),
    page=st.integers(2, 200),
)
def test_at_an_even_pace_the_estimate_holds_the_true_count(
    total: int, per_second: float, days: float, page: int
) -> None:
    """Records arriving at an even pace: the estimated range of the window's records holds the true count, within
    the rounding of one second per record."""
    page = min(page, total - 1)

    def at(offset: int) -> Dated:
        return Dated(offset, BASE + timedelta(seconds=offset / per_second))

    points = [at(0), *(at(o) for o in range(total - page, total))]
    start = at(total - 1).moment - timedelta(days=days)
    truth = total - max(0, math.ceil(total - 1 - days * 86400 * per_second))  # offsets dated from start on
    low, high = window_records(total, points, start) or (0, total)
    assert 0 <= low <= high <= total
    assert low - 2 <= truth <= high + 2


@settings(max_examples=200, deadline=None)  # each example starts a thread pool, as the crawl's search does
@given(st.integers(1, 5000), st.integers(0, 5000), st.integers(1, 16), st.integers(1, 300))
def test_the_window_search_estimate_counts_the_searchs_reads(
    total: int, boundary: int, width: int, within: int
) -> None:
    """The requests counted are those of the crawl's own search (crawl.ranges.probe_offset) for that boundary, and
    the start it takes is where the search left it."""
    boundary = min(boundary, total)
    reads: list[int] = []

    class Source:
        def get_page(self, offset: int, limit: int) -> list[dict[str, str]]:
            reads.append(offset)
            return [{"d": (BASE + timedelta(seconds=offset)).isoformat()}]

    moment = BASE + timedelta(seconds=boundary)
    lo, hi = probe_offset(Source(), total, DateRule(("d",), "UTC"), moment, width, within)  # type: ignore[arg-type]
    assert lo <= boundary <= hi and hi - lo < within
    requests, _, start = window_search(total, boundary, width, within)
    assert (requests, start) == (len(reads), lo)


@given(st.integers(0, 3000), st.integers(0, 3000), st.integers(1, 300), st.booleans())
def test_batches_between_counts_the_plan(total: int, floor: int, size: int, aligned: bool) -> None:
    planned = list(iter_plan(total, 0, size, floor=min(floor, total), aligned=aligned))
    assert batches_between(min(floor, total), total, size, aligned) == len(planned)


RATE = Rate(
    batch_size=100,
    aligned=False,
    concurrency=4,
    max_in_flight=8,
    requests_per_s=10.0,
    max_expired_batches=5,
    latency_s=0.05,
    total_requests=1,
)


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_the_estimate_is_a_range_from_the_fewer_to_the_more_records(total: int, a: int, b: int) -> None:
    low, high = sorted((min(a, total), min(b, total)))
    estimate = first_crawl_estimate(total, (low, high), RATE)
    assert estimate["records_in_window"] == [low, high]
    assert estimate["requests"][0] <= estimate["requests"][1]
    assert estimate["seconds"][0] <= estimate["seconds"][1]
    assert estimate["exact"] is (low == high)
    # never fewer pages than the window's records need, never faster than the rate
    assert estimate["requests"][1] >= 1 + -(-high // 100)
    assert estimate["seconds"][1] >= round(estimate["requests"][1] / 10.0, 1) - 0.1


def test_the_estimate_at_the_configured_rate() -> None:
    """10,000 records, 1,000 in the window, pages of 100 at 10 requests/s: the count, the search (4 reads a round,
    3 rounds to within a page: offset 8,961), 16 pages (from 5 pages below 8,961)."""
    estimate = first_crawl_estimate(10_000, (1000, 1000), RATE)
    assert window_search(10_000, 9000, 4, 100) == (12, 3, 8961)
    assert estimate["requests"] == [1 + 12 + 16] * 2
    assert estimate["seconds"] == [round((1 + 12 + 16) / 10.0, 1)] * 2
    unknown = first_crawl_estimate(10_000, None, RATE)
    assert unknown["exact"] is False and unknown["records_in_window"] == [0, 10_000]


# ------------------------------------------------------------------ verdict


def report(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "t",
        "source": "src",
        "checked_at": "now",
        "requests": 3,
        "total": {"value": 10, "how": "count endpoint", "requests": 1},
        "page": {"where": "offsets [0, 10)", "records_path": "data.data", "records": 10, "suggested_paths": []},
        "keys": key_report([{"id": str(i)} for i in range(10)], "id"),
        "dates": date_report([{"d": "2026-11-02"}] * 10, ("d",), UTC, Window(BASE, BASE + timedelta(days=3))),
        "order": order_verdict(dated([1, 2])),
        "sample_message": {"topic": "t", "key": "9", "headers": [["crawl_task", "t"]], "value": "{}"},
        "first_crawl": first_crawl_estimate(10, (10, 10), RATE),
    }
    return base | parts


def test_a_healthy_report_has_no_problem() -> None:
    healthy = report()
    assert problems(healthy) == []
    assert exit_code(healthy) == 0
    healthy["problems"] = []
    assert "ok         the source suits the task" in render_text(healthy)


def test_a_wrong_records_path_is_the_first_problem_and_names_the_lists_found() -> None:
    page = {
        "where": "offsets [0, 10)",
        "records_path": "data.data",
        "records": None,
        "suggested_paths": [{"path": "data.items", "records": 10}],
    }
    wrong = {key: value for key, value in report(page=page).items() if key in ("task", "source", "checked_at", "total")}
    wrong |= {"page": page, "requests": 2}
    found = problems(wrong)
    assert len(found) == 1
    assert "no list at records_path 'data.data'" in found[0] and "'data.items' (10 records)" in found[0]
    assert exit_code(wrong) == 1
    text = render_text({**wrong, "problems": found})
    assert f"FIX        {found[0]}" in text and "(suggested: 'data.items')" in text
    assert "empty list" in problems(report(page={**page, "records": 0, "suggested_paths": []}))[0]


@pytest.mark.parametrize(
    ("part", "value", "says"),
    [
        ("order", order_verdict(dated([2, 1])), "dates do not grow with the offset"),
        ("keys", key_report([{"id": "1"}, {}], "id"), "1 of 2 records have no kafka.key_field 'id'"),
        ("keys", key_report([{"id": "1"}, {"id": "1"}], "id"), "keys repeat on one page (1)"),
        ("dates", date_report([{"d": "x"}], ("d",), UTC, Window(BASE, BASE)), "no record has a date"),
    ],
)
def test_each_problem_in_the_data_fails_the_check(part: str, value: Any, says: str) -> None:
    found = problems(report(**{part: value}))
    assert any(says in problem for problem in found), found
    assert exit_code(report(**{part: value})) == 1


def test_an_unknown_order_is_no_problem() -> None:
    assert problems(report(order=order_verdict(dated([1, 1])))) == []


def test_the_schema_line_names_each_field_its_types_and_whether_every_record_has_it():
    from crawler_ops.message.schemas import json_schema
    from crawler_ops.ops.check_text import schema_fields

    records = [{"id": 1, "aae397": "2026-12-01", "pay": 1.5, "tags": ["a"]}, {"id": 2, "pay": None, "tags": []}]
    assert schema_fields(json_schema(records)) == "id integer, aae397 string?, pay number?, tags array"
    assert schema_fields(json_schema([{"x": 1}, {"x": "a"}])) == "x integer|string"
    assert schema_fields({"type": "object"}) == "no fields"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=60), st.integers(0, 5))
def test_disorder_is_the_widest_distance_between_two_records_out_of_date_order(seconds, start):
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    dated = [Dated(start + i, t0 + timedelta(seconds=s)) for i, s in enumerate(seconds)]
    pairs = [(a, b) for a in dated for b in dated if a.offset < b.offset and b.moment < a.moment]
    assert disorder(dated[::-1]) == max((b.offset - a.offset for a, b in pairs), default=0)
