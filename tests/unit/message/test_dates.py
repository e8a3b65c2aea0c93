"""Unit tests of crawler_ops.message.dates: the date formats real sources send."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.message.dates import parse_date

SHANGHAI = ZoneInfo("Asia/Shanghai")
PROPERTY = settings(max_examples=300, deadline=None)
LOCAL = datetime(2026, 11, 20, 10, 11, 12, tzinfo=SHANGHAI)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1795140672", datetime(2026, 11, 20, 2, 11, 12, tzinfo=UTC)),
        (" 1795140672123 ", datetime(2026, 11, 20, 2, 11, 12, 123_000, tzinfo=UTC)),
        ("1795140672.5", datetime(2026, 11, 20, 2, 11, 12, 500_000, tzinfo=UTC)),
        ("1701011200000", datetime(2023, 11, 26, 15, 6, 40, tzinfo=UTC)),
        ("2026.11.20", datetime(2026, 11, 20, tzinfo=SHANGHAI)),
        ("2026.11.20 10:11:12", LOCAL),
        ("2026.1.5 10:11", datetime(2026, 1, 5, 10, 11, tzinfo=SHANGHAI)),
        ("2026-1-5", datetime(2026, 1, 5, tzinfo=SHANGHAI)),
        ("2026/1/5 10:11:12.25", datetime(2026, 1, 5, 10, 11, 12, 250_000, tzinfo=SHANGHAI)),
        ("2026年11月20日", datetime(2026, 11, 20, tzinfo=SHANGHAI)),
        ("2026年11月20日 10:11:12", LOCAL),
        ("2026年11月20日10时11分12秒", LOCAL),
        ("2026年1月5日 9点30分", datetime(2026, 1, 5, 9, 30, tzinfo=SHANGHAI)),
        ("20261120", datetime(2026, 11, 20, tzinfo=SHANGHAI)),
        ("978278400000", datetime(2000, 12, 31, 16, tzinfo=UTC)),
        ("20261120101112", LOCAL),
        ("2026-11-20T10:11:12.250Z", datetime(2026, 11, 20, 10, 11, 12, 250_000, tzinfo=UTC)),
        ("2026-11-20T10:11:12.123456789Z", datetime(2026, 11, 20, 10, 11, 12, 123_456, tzinfo=UTC)),
        ("2026-11-20T10:11:12.5+08:00", datetime(2026, 11, 20, 2, 11, 12, 500_000, tzinfo=UTC)),
    ],
    ids=[
        "epoch-seconds-text",
        "epoch-millis-text",
        "epoch-seconds-fraction-text",
        "epoch-millis-that-python-reads-as-iso",
        "dotted-date",
        "dotted-date-time",
        "dotted-single-digits",
        "dashed-single-digits",
        "slashed-single-digits-fraction",
        "chinese-date",
        "chinese-date-clock-time",
        "chinese-date-chinese-time",
        "chinese-single-digits-dian",
        "compact-date",
        "twelve-digits-are-epoch-millis",
        "compact-seconds",
        "iso-fraction-zulu",
        "iso-nanoseconds-zulu",
        "iso-fraction-offset",
    ],
)
def test_date_formats_of_real_sources_parse_to_the_instant(value: str, expected: datetime) -> None:
    assert parse_date(value, SHANGHAI) == expected


@pytest.mark.parametrize(
    "value",
    ["2026.11-20", "2026年13月20日", "20261320", "2026.11.20 25:00", "2026年11月20", "9" * 400, "1e12", "-1795140672"],
    ids=["mixed-separators", "month-13", "compact-month-13", "hour-25", "no-day-sign", "huge", "exponent", "negative"],
)
def test_what_looks_like_a_date_but_is_not_one_is_none(value: str) -> None:
    assert parse_date(value, SHANGHAI) is None


moments = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2099, 12, 31), timezones=st.just(SHANGHAI))
STYLES = {
    "compact-date": lambda m: (m.strftime("%Y%m%d"), m.replace(hour=0, minute=0, second=0, microsecond=0)),
    "compact-seconds": lambda m: (m.strftime("%Y%m%d%H%M%S"), m.replace(microsecond=0)),
    "chinese": lambda m: (f"{m.year}年{m.month}月{m.day}日 {m:%H:%M:%S}", m.replace(microsecond=0)),
    "chinese-time": lambda m: (
        f"{m.year}年{m.month}月{m.day}日{m.hour}时{m.minute}分{m.second}秒",
        m.replace(microsecond=0),
    ),
    "dotted": lambda m: (m.strftime("%Y.%m.%d %H:%M:%S.%f"), m),
    "epoch-seconds": lambda m: (str(int(m.timestamp())), m.replace(microsecond=0)),
    "epoch-millis": lambda m: (str(int(m.timestamp() * 1000)), m.replace(microsecond=m.microsecond // 1000 * 1000)),
    "iso-zulu": lambda m: (m.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), m),
}


@PROPERTY
@given(moments, st.sampled_from(sorted(STYLES)))
def test_every_format_reads_back_the_instant_it_was_written_from(moment: datetime, style: str) -> None:
    text, expected = STYLES[style](moment)
    parsed = parse_date(text, SHANGHAI)
    assert parsed is not None
    assert abs(parsed - expected) <= timedelta(milliseconds=1 if style == "epoch-millis" else 0)
