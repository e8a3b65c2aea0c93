"""Unit tests of crawler_ops.filtering: date parsing, the first usable date field, the run's window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.filtering import DateRule, Verdict, Window, classify, parse_date, record_date

SHANGHAI = ZoneInfo("Asia/Shanghai")
FIELDS = ("aae397", "Collect_time")
RULE = DateRule(FIELDS, "Asia/Shanghai")
REF = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
WINDOW = Window.around(REF, days=7, tolerance=timedelta(hours=24))
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PROPERTY = settings(max_examples=200, deadline=None)

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


def test_window_around_spans_days_before_and_tolerance_after_the_reference() -> None:
    window = Window.around(REF, days=7, tolerance=timedelta(hours=24))
    assert window.start == datetime(2026, 11, 13, 12, tzinfo=UTC)
    assert window.end == datetime(2026, 11, 21, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("moment", "inside"),
    [
        (datetime(2026, 11, 13, 12, tzinfo=UTC), True),
        (datetime(2026, 11, 21, 12, tzinfo=UTC), True),
        (datetime(2026, 11, 21, 20, tzinfo=SHANGHAI), True),
        (datetime(2026, 11, 13, 11, 59, 59, 999_999, tzinfo=UTC), False),
        (datetime(2026, 11, 21, 12, 0, 0, 1, tzinfo=UTC), False),
        (datetime(2026, 11, 21, 20, 0, 1, tzinfo=SHANGHAI), False),
    ],
    ids=["start", "end", "end-in-other-zone", "just-before-start", "just-after-end", "after-end-in-other-zone"],
)
def test_window_bounds_are_inclusive(moment: datetime, inside: bool) -> None:
    assert WINDOW.contains(moment) is inside


def test_window_without_tolerance_ends_at_the_reference() -> None:
    window = Window.around(REF, days=1)
    assert window.end == REF
    assert not window.contains(REF + timedelta(microseconds=1))


def test_window_rejects_a_naive_reference_time() -> None:
    with pytest.raises(ValueError, match=r"timezone-aware"):
        Window.around(datetime(2026, 11, 20, 12), days=7)


# --- classify -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "verdict", "detail"),
    [
        ({"aae397": "2026-11-20 10:00:00"}, Verdict.KEEP, "aae397"),
        ({"aae397": "garbage", "Collect_time": "2026-11-18T00:00:00Z"}, Verdict.KEEP, "Collect_time"),
        ({"aae397": "2026-11-01 10:00:00"}, Verdict.EXPIRED, "aae397"),
        ({"aae397": "2026-11-23 10:00:00"}, Verdict.EXPIRED, "aae397"),
        ({"aae397": "not-a-date"}, Verdict.BAD_DATE, "no usable date: aae397='not-a-date' unparseable"),
    ],
    ids=["recent", "fallback-field", "too-old", "too-far-in-the-future", "bad-date"],
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
# References and dates across a century, so a filter that looked at the wall clock would disagree.
seconds_since_2000 = st.integers(0, 100 * 365 * 86_400)
BASE = datetime(2000, 1, 1, tzinfo=UTC)


@PROPERTY
@given(
    ref_s=seconds_since_2000,
    offset_s=st.integers(-30 * 86_400, 30 * 86_400),
    days=st.integers(1, 30),
    tolerance_h=st.integers(0, 48),
    style=st.sampled_from(RENDER_STYLES),
    fallback=st.booleans(),
)
def test_verdict_depends_only_on_the_record_and_the_reference_time(
    ref_s: int, offset_s: int, days: int, tolerance_h: int, style: str, fallback: bool
) -> None:
    ref = BASE + timedelta(seconds=ref_s)
    moment = ref + timedelta(seconds=offset_s)
    value = _render(moment, style)
    record = {"aae397": "garbage", "Collect_time": value} if fallback else {"aae397": value}
    window = Window.around(ref, days=days, tolerance=timedelta(hours=tolerance_h))

    expected = ref - timedelta(days=days) <= moment <= ref + timedelta(hours=tolerance_h)
    first = classify(record, RULE, window, SHANGHAI)
    assert first == classify(dict(record), RULE, Window.around(ref, days, timedelta(hours=tolerance_h)), SHANGHAI)
    assert first[0] is (Verdict.KEEP if expected else Verdict.EXPIRED)
    assert first[1] == ("Collect_time" if fallback else "aae397")


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
    window = Window.around(ref, days=days, tolerance=tolerance)
    oldest = ref - timedelta(days=days)
    newest = ref + tolerance
    tick = timedelta(microseconds=1)

    def verdict(moment: datetime) -> Verdict:
        return classify({"aae397": moment.isoformat()}, RULE, window, SHANGHAI)[0]

    assert verdict(oldest) is Verdict.KEEP
    assert verdict(newest) is Verdict.KEEP
    assert verdict(oldest - tick) is Verdict.EXPIRED
    assert verdict(newest + tick) is Verdict.EXPIRED
