"""Unit tests of crawler_ops.message.filtering: date parsing, the first usable date field, the run's window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.message.filtering import DateRule, Verdict, Window, WindowTest, classify, parse_date, record_date

SHANGHAI = ZoneInfo("Asia/Shanghai")
FIELDS = ("aae397", "Collect_time")
RULE = DateRule(FIELDS, "Asia/Shanghai")
REF = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
# The wall clock of these tests is the reference time itself, so the window ends 24 h after it.
WINDOW = Window.since(REF, days=7, now=REF, tolerance=timedelta(hours=24))
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PROPERTY = settings(max_examples=200, deadline=None)
# References and dates across a century, so a filter that looked at the wall clock would disagree.
seconds_since_2000 = st.integers(0, 100 * 365 * 86_400)
BASE = datetime(2000, 1, 1, tzinfo=UTC)

# --- parse_date ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-20 10:11:12", datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC)),
        ("2026-11-20T10:11:12", datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC)),
        ("2026-11-20", datetime(2026, 11, 19, 16, 0, tzinfo=UTC)),
        ("2026/11/20 10:11:12", datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC)),
        ("  2026-11-20 10:11:12  ", datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC)),
        ("2026-11-20T10:11:12+08:00", datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC)),
        ("2026-11-20T10:11:12-05:00", datetime(2026, 11, 20, 15, 11, 12, tzinfo=UTC)),
        ("2026-11-20T10:11:12Z", datetime(2026, 11, 20, 10, 11, 12, tzinfo=UTC)),
        ("2026-11-20T10:11:12.250+00:00", datetime(2026, 11, 20, 10, 11, 12, 250_000, tzinfo=UTC)),
        (1_795_140_672, datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC)),
        (1_795_140_672.5, datetime(2026, 11, 20, 2, 11, 12, 500_000, tzinfo=UTC)),
        (1_795_140_672_123, datetime(2026, 11, 20, 2, 11, 12, 123_000, tzinfo=UTC)),
        (1_795_140_672_123.0, datetime(2026, 11, 20, 2, 11, 12, 123_000, tzinfo=UTC)),
    ],
    ids=[
        "naive-space-is-shanghai",
        "naive-T-is-shanghai",
        "date-only-is-shanghai-midnight",
        "slashes",
        "surrounding-blanks",
        "offset-plus-8",
        "offset-minus-5",
        "zulu",
        "fraction-with-offset",
        "epoch-seconds-int",
        "epoch-seconds-float",
        "epoch-millis-int",
        "epoch-millis-float",
    ],
)
def test_parse_date_reads_iso_text_and_epoch_numbers_as_aware_instants(value: object, expected: datetime) -> None:
    parsed = parse_date(value, SHANGHAI)
    assert parsed == expected
    assert parsed is not None and parsed.tzinfo is not None


def test_naive_text_takes_the_configured_timezone() -> None:
    assert parse_date("2026-11-20 10:00:00", ZoneInfo("UTC")) == datetime(2026, 11, 20, 10, tzinfo=UTC)
    assert parse_date("2026-11-20 10:00:00", SHANGHAI) == datetime(2026, 11, 20, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [True, False, None, "", "   ", "garbage", "not-a-date", "2026-13-01", "11/20/2026", [], {}, float("nan"), 10**30],
    ids=[
        "true",
        "false",
        "none",
        "empty",
        "blank",
        "garbage",
        "demo-bad-date",
        "month-13",
        "us-order",
        "list",
        "dict",
        "nan",
        "huge-number",
    ],
)
def test_parse_date_returns_none_for_what_is_not_a_date(value: object) -> None:
    assert parse_date(value, SHANGHAI) is None


@PROPERTY
@given(st.integers(0, 4_102_444_800_000))
def test_epoch_milliseconds_parse_to_the_exact_millisecond(millis: int) -> None:
    if millis < 100_000_000_000:  # below the threshold numbers are read as seconds
        millis += 100_000_000_000
    assert parse_date(millis, SHANGHAI) == EPOCH + timedelta(milliseconds=millis)


# --- record_date ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "expected_field", "expected"),
    [
        (
            {"aae397": "2026-11-20 10:00:00", "Collect_time": "2026-11-01T00:00:00+08:00"},
            "aae397",
            datetime(2026, 11, 20, 2, tzinfo=UTC),
        ),
        ({"Collect_time": "2026-11-19T08:00:00+08:00"}, "Collect_time", datetime(2026, 11, 19, 0, tzinfo=UTC)),
        (
            {"aae397": None, "Collect_time": "2026-11-19T08:00:00+08:00"},
            "Collect_time",
            datetime(2026, 11, 19, 0, tzinfo=UTC),
        ),
        (
            {"aae397": "", "Collect_time": "2026-11-19T08:00:00+08:00"},
            "Collect_time",
            datetime(2026, 11, 19, 0, tzinfo=UTC),
        ),
        (
            {"aae397": "not-a-date", "Collect_time": "2026-11-19T08:00:00+08:00"},
            "Collect_time",
            datetime(2026, 11, 19, 0, tzinfo=UTC),
        ),
        (
            {"aae397": 1_795_140_672_000, "Collect_time": "garbage"},
            "aae397",
            datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC),
        ),
    ],
    ids=["first-field-wins", "first-missing", "first-null", "first-empty", "first-garbage", "epoch-millis"],
)
def test_record_date_takes_the_first_present_parseable_field(
    record: dict[str, object], expected_field: str, expected: datetime
) -> None:
    assert record_date(record, FIELDS, SHANGHAI) == (expected, expected_field)


@pytest.mark.parametrize(
    ("record", "fragments"),
    [
        ({}, ["aae397 missing", "Collect_time missing"]),
        ({"aae397": "not-a-date"}, ["aae397='not-a-date' unparseable", "Collect_time missing"]),
        ({"aae397": "", "Collect_time": "yesterday"}, ["aae397 missing", "Collect_time='yesterday' unparseable"]),
        ({"aae397": True, "Collect_time": None}, ["aae397='True' unparseable", "Collect_time missing"]),
    ],
    ids=["both-missing", "garbage-and-missing", "empty-and-garbage", "bool-and-null"],
)
def test_record_without_a_usable_date_gets_a_reason_naming_each_field(
    record: dict[str, object], fragments: list[str]
) -> None:
    moment, reason = record_date(record, FIELDS, SHANGHAI)
    assert moment is None
    assert reason.startswith("no usable date")
    for fragment in fragments:
        assert fragment in reason


def test_reason_truncates_long_values() -> None:
    _, reason = record_date({"aae397": "x" * 500}, ("aae397",), SHANGHAI)
    assert "x" * 40 in reason
    assert "x" * 41 not in reason


# --- Window -------------------------------------------------------------------------------------------------------


def test_a_watermark_window_starts_days_before_the_reference_and_ends_at_the_wall_clock_plus_tolerance() -> None:
    now = REF + timedelta(days=3)
    window = Window.since(REF, days=7, now=now, tolerance=timedelta(hours=24))
    assert window.start == datetime(2026, 11, 13, 12, tzinfo=UTC)
    assert window.end == datetime(2026, 11, 24, 12, tzinfo=UTC)
    assert not window.half_open


def test_a_reference_ahead_of_the_wall_clock_keeps_its_own_records() -> None:
    window = Window.since(REF, days=7, now=REF - timedelta(days=2), tolerance=timedelta(hours=1))
    assert window.end == REF + timedelta(hours=1)


@pytest.mark.parametrize(
    ("moment", "verdict"),
    [
        (datetime(2026, 11, 13, 12, tzinfo=UTC), Verdict.KEEP),
        (datetime(2026, 11, 21, 12, tzinfo=UTC), Verdict.KEEP),
        (datetime(2026, 11, 21, 20, tzinfo=SHANGHAI), Verdict.KEEP),
        (datetime(2026, 11, 13, 11, 59, 59, 999_999, tzinfo=UTC), Verdict.EXPIRED),
        (datetime(2026, 11, 21, 12, 0, 0, 1, tzinfo=UTC), Verdict.BAD_DATE),
        (datetime(2026, 11, 21, 20, 0, 1, tzinfo=SHANGHAI), Verdict.BAD_DATE),
    ],
    ids=["start", "end", "end-in-other-zone", "just-before-start", "just-after-end", "after-end-in-other-zone"],
)
def test_a_watermark_window_keeps_both_bounds_and_calls_later_dates_garbage(moment: datetime, verdict: Verdict) -> None:
    assert WINDOW.verdict(moment) is verdict


def test_a_record_newer_than_the_reference_is_kept_when_the_run_executes_later() -> None:
    # A run for REF re-executed ten days later: a record dated five days after REF is in its window.
    window = Window.since(REF, days=7, now=REF + timedelta(days=10))
    assert window.verdict(REF + timedelta(days=5)) is Verdict.KEEP
    assert window.verdict(REF - timedelta(days=7, seconds=1)) is Verdict.EXPIRED


@pytest.mark.parametrize(
    ("moment", "verdict"),
    [
        (datetime(2026, 11, 19, tzinfo=UTC), Verdict.KEEP),
        (datetime(2026, 11, 19, 23, 59, 59, 999_999, tzinfo=UTC), Verdict.KEEP),
        (datetime(2026, 11, 20, tzinfo=UTC), Verdict.EXPIRED),
        (datetime(2026, 11, 18, 23, 59, 59, 999_999, tzinfo=UTC), Verdict.EXPIRED),
        (datetime(2030, 1, 1, tzinfo=UTC), Verdict.EXPIRED),
    ],
    ids=["start-is-in", "last-instant-is-in", "end-is-the-next-interval", "before-start", "far-future-is-not-garbage"],
)
def test_a_backfill_interval_is_half_open(moment: datetime, verdict: Verdict) -> None:
    window = Window.interval(datetime(2026, 11, 19, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC))
    assert window.verdict(moment) is verdict
    assert window.in_zone(SHANGHAI).verdict(moment) is verdict


@PROPERTY
@given(
    start_s=seconds_since_2000,
    lengths=st.lists(st.integers(1, 3 * 86_400), min_size=1, max_size=5),
    probe_s=st.integers(-86_400, 16 * 86_400),
)
def test_adjacent_backfill_intervals_keep_every_instant_exactly_once(
    start_s: int, lengths: list[int], probe_s: int
) -> None:
    edges = [BASE + timedelta(seconds=start_s)]
    for length in lengths:
        edges.append(edges[-1] + timedelta(seconds=length))
    moment = edges[0] + timedelta(seconds=probe_s)
    windows = [Window.interval(a, b) for a, b in pairwise(edges)]
    keeping = sum(w.verdict(moment) is Verdict.KEEP for w in windows)
    assert keeping == (1 if edges[0] <= moment < edges[-1] else 0)


def test_windows_reject_naive_times() -> None:
    with pytest.raises(ValueError, match=r"^the reference time and the wall clock must be timezone-aware$"):
        Window.since(datetime(2026, 11, 20, 12), days=7, now=REF)
    with pytest.raises(ValueError, match=r"^a data interval must be timezone-aware$"):
        Window.interval(datetime(2026, 11, 19), REF)
    with pytest.raises(ValueError, match=r"^a data interval must be timezone-aware$"):
        Window.interval(REF, datetime(2026, 11, 21))


# --- classify -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "verdict", "detail"),
    [
        ({"aae397": "2026-11-20 10:00:00"}, Verdict.KEEP, "aae397"),
        ({"aae397": "garbage", "Collect_time": "2026-11-18T00:00:00Z"}, Verdict.KEEP, "Collect_time"),
        ({"aae397": "2026-11-01 10:00:00"}, Verdict.EXPIRED, "aae397"),
        ({"aae397": "2026-11-23 10:00:00"}, Verdict.BAD_DATE, "aae397='2026-11-23 10:00:00' is after"),
        ({"aae397": "not-a-date"}, Verdict.BAD_DATE, "no usable date: aae397='not-a-date' unparseable"),
    ],
    ids=["recent", "fallback-field", "too-old", "later-than-the-clock-plus-tolerance", "bad-date"],
)
def test_classify_gives_a_verdict_with_the_field_used_or_the_reason(
    record: dict[str, object], verdict: Verdict, detail: str
) -> None:
    got_verdict, got_detail = classify(record, RULE, WINDOW, SHANGHAI)
    assert got_verdict is verdict
    assert got_detail.startswith(detail)


def _render(moment: datetime, style: str) -> object:
    if style == "iso-offset":
        return moment.astimezone(timezone(timedelta(hours=-3))).isoformat()
    if style == "naive-shanghai":
        return moment.astimezone(SHANGHAI).replace(tzinfo=None).isoformat(sep=" ")
    if style == "slashes-shanghai":
        return moment.astimezone(SHANGHAI).strftime("%Y/%m/%d %H:%M:%S")
    if style == "epoch-seconds":
        return (moment - EPOCH) // timedelta(seconds=1)
    return (moment - EPOCH) // timedelta(milliseconds=1)


RENDER_STYLES = ["iso-offset", "naive-shanghai", "slashes-shanghai", "epoch-seconds", "epoch-millis"]


@PROPERTY
@given(
    ref_s=seconds_since_2000,
    offset_s=st.integers(-30 * 86_400, 30 * 86_400),
    days=st.integers(1, 30),
    tolerance_h=st.integers(0, 48),
    late_s=st.integers(-86_400, 20 * 86_400),
    style=st.sampled_from(RENDER_STYLES),
    fallback=st.booleans(),
)
def test_verdict_depends_only_on_the_record_the_reference_time_and_the_wall_clock_bound(
    ref_s: int, offset_s: int, days: int, tolerance_h: int, late_s: int, style: str, fallback: bool
) -> None:
    ref = BASE + timedelta(seconds=ref_s)
    now = ref + timedelta(seconds=late_s)  # the run executes this much after its reference time
    moment = ref + timedelta(seconds=offset_s)
    value = _render(moment, style)
    record = {"aae397": "garbage", "Collect_time": value} if fallback else {"aae397": value}
    tolerance = timedelta(hours=tolerance_h)
    window = Window.since(ref, days, now, tolerance)

    if moment < ref - timedelta(days=days):
        expected = Verdict.EXPIRED
    elif moment <= max(ref, now) + tolerance:
        expected = Verdict.KEEP
    else:
        expected = Verdict.BAD_DATE
    first = classify(record, RULE, window, SHANGHAI)
    assert first == classify(dict(record), RULE, Window.since(ref, days, now, tolerance), SHANGHAI)
    assert first[0] is expected
    assert first[1].startswith("Collect_time" if fallback else "aae397")
    if expected is Verdict.BAD_DATE:
        assert "the wall clock plus filter.future_tolerance_hours" in first[1]


@PROPERTY
@given(
    ref_us=st.integers(0, 100 * 365 * 86_400 * 10**6),
    days=st.floats(0.001, 60, allow_nan=False),
    tolerance_s=st.integers(0, 3 * 86_400),
    offset_h=st.integers(-14, 14),
)
def test_boundary_instants_are_kept_and_one_microsecond_beyond_is_not(
    ref_us: int, days: float, tolerance_s: int, offset_h: int
) -> None:
    zone = timezone(timedelta(hours=offset_h))
    ref = (BASE + timedelta(microseconds=ref_us)).astimezone(zone)
    tolerance = timedelta(seconds=tolerance_s)
    window = Window.since(ref, days=days, now=ref, tolerance=tolerance)
    oldest = ref - timedelta(days=days)
    newest = ref + tolerance
    tick = timedelta(microseconds=1)

    def verdict(moment: datetime) -> Verdict:
        return classify({"aae397": moment.isoformat()}, RULE, window, SHANGHAI)[0]

    assert verdict(oldest) is Verdict.KEEP
    assert verdict(newest) is Verdict.KEEP
    assert verdict(oldest - tick) is Verdict.EXPIRED
    assert verdict(newest + tick) is Verdict.BAD_DATE


# --- exact reasons, and WindowTest's fast path ---------------------------------------------------------------------


def test_a_reason_lists_each_fields_problem_in_order() -> None:
    reason = record_date({"aae397": "x" * 50, "Collect_time": None}, FIELDS, SHANGHAI)[1]
    assert reason == f"no usable date: aae397='{'x' * 40}' unparseable, Collect_time missing"


def test_a_date_after_the_end_of_a_closed_window_is_garbage_quoting_the_start_of_its_value() -> None:
    window = Window.since(REF, days=7, now=REF)
    value = "2099-01-01 00:00:00" + " " * 30  # parsed stripped, quoted cut at 40 characters
    verdict, reason = classify({"aae397": value}, DateRule(("aae397",), "UTC"), window, UTC)
    assert verdict is Verdict.BAD_DATE
    assert reason == (
        f"aae397={value[:40]!r} is after {window.end.isoformat()}, the wall clock plus filter.future_tolerance_hours: "
        "not a real date"
    )


def test_a_window_in_a_zone_has_both_bounds_in_that_very_zone_object() -> None:
    window = Window.since(REF, days=7, now=REF).in_zone(SHANGHAI)
    assert window.start.tzinfo is SHANGHAI and window.end.tzinfo is SHANGHAI
    assert window == Window.since(REF, days=7, now=REF), "the same instants"


RULE_ONE = DateRule(("aae397",), "Asia/Shanghai")


@pytest.mark.parametrize("half_open", [False, True], ids=["closed", "half-open"])
@pytest.mark.parametrize("zones", [("rule", "utc"), ("utc", "rule"), ("utc", "utc"), ("rule", "rule")])
def test_the_page_test_gives_classifys_verdicts_whatever_zones_the_window_bounds_are_in(zones, half_open) -> None:
    # Naive dates are Shanghai wall times; the bounds are compared as wall times only when both are in that zone.
    start, end = datetime(2026, 11, 13, 12, tzinfo=UTC), datetime(2026, 11, 20, 12, tzinfo=UTC)
    window = Window(
        *(
            moment.astimezone(SHANGHAI if zone == "rule" else UTC)
            for moment, zone in zip((start, end), zones, strict=True)
        ),
        half_open,
    )
    values = [
        (bound.astimezone(SHANGHAI) + timedelta(hours=shift)).strftime("%Y-%m-%d %H:%M:%S")
        for bound in (start, end)
        for shift in (-9, -8, -1, 0, 1, 8, 9)
    ]
    expected = [classify({"aae397": value}, RULE_ONE, window, SHANGHAI) for value in values]
    assert WindowTest(RULE_ONE, window, SHANGHAI).verdicts([(value,) for value in values]) == expected


@pytest.mark.parametrize(
    "value",
    ["2026-11-19 08:00:00", "2026-11-19T08:00:00+08:00", "2026/11/19 08:00:00", " 2026-11-19 08:00:00 "],
    ids=["iso", "iso-offset", "slashes", "padded"],
)
@pytest.mark.parametrize("half_open", [False, True], ids=["closed", "half-open"])
def test_iso_dates_inside_the_window_or_outside_a_half_open_one_are_decided_without_classify(
    value, half_open, monkeypatch
) -> None:
    window = Window(datetime(2026, 11, 13, tzinfo=SHANGHAI), datetime(2026, 11, 20, tzinfo=SHANGHAI), half_open)
    test = WindowTest(RULE_ONE, window, SHANGHAI)
    monkeypatch.setattr(test, "slow", lambda values: pytest.fail(f"{values} went to classify"))
    assert test.verdicts([(value,)]) == [(Verdict.KEEP, "aae397")]
    if half_open:
        after = value.replace("2026", "2027")
        assert test.verdicts([(after,)]) == [(Verdict.EXPIRED, "aae397")], "outside a backfill's interval"
