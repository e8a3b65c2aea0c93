"""The fast paths of filtering a page decide exactly as the record-by-record rules do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.config import SourceConfig
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.message.filtering import DateRule, Window, WindowTest, classify
from crawler_ops.message.pages import Page, head_fields
from crawler_ops.message.records import build_messages

RULE = DateRule(("aae397", "Collect_time"), "Asia/Shanghai")
REF = datetime(2026, 11, 20, 12, tzinfo=UTC)
HEADERS = [("crawl_task", b"t"), ("run_id", b"r")]
PROPERTY = settings(max_examples=200, deadline=None)

WINDOWS = [
    Window.since(REF, days=7, now=REF, tolerance=timedelta(hours=24)),
    Window.since(REF, days=0.5, now=REF),
    Window(datetime(2026, 11, 15, tzinfo=timezone(timedelta(hours=-5))), REF),
    Window.interval(datetime(2026, 11, 19, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)),
    Window.interval(datetime(2026, 11, 18, 16, tzinfo=UTC), datetime(2026, 11, 19, 16, tzinfo=UTC)),
    # Ends inside New York's repeated hour (1:00-2:00 twice on 2026-11-01).
    Window(datetime(2026, 10, 31, 12, tzinfo=UTC), datetime(2026, 11, 1, 6, 10, tzinfo=UTC)),
]
ZONES = [ZoneInfo("Asia/Shanghai"), ZoneInfo("UTC"), ZoneInfo("America/New_York")]
windows, zones = st.sampled_from(WINDOWS), st.sampled_from(ZONES)
# Wall times near a window's edges, as any of the zones reads them: where a wrong comparison shows.
near_edge = st.builds(
    lambda edge, zone, shift: (edge.astimezone(zone) + shift).replace(tzinfo=None),
    st.sampled_from([w.start for w in WINDOWS] + [w.end for w in WINDOWS]),
    zones,
    st.timedeltas(min_value=-timedelta(hours=14), max_value=timedelta(hours=14)),
)
moments = st.one_of(near_edge, st.datetimes(min_value=datetime(2026, 10, 25), max_value=datetime(2026, 11, 25)))

iso_text = st.builds(
    lambda moment, sep, suffix, pad: f"{pad}{moment.isoformat(sep=sep, timespec='seconds')}{suffix}{pad}",
    moments,
    st.sampled_from([" ", "T"]),
    st.sampled_from(["", "Z", "+08:00", "-05:00", ".5", ".250+00:00"]),
    st.sampled_from(["", " "]),
)
date_value = st.one_of(
    iso_text,
    iso_text.map(lambda text: text.replace("-", "/")),
    moments.map(lambda moment: moment.date().isoformat()),
    st.sampled_from(["", "   ", "not-a-date", "2026-13-01", "2026-11-20t10:00:00z", None, True, 0, [], {}]),
    st.integers(1_790_000_000, 1_800_000_000),
    st.integers(1_790_000_000_000, 1_800_000_000_000),
    st.floats(1.79e9, 1.8e9),
    # Digits as text: epoch numbers, compact dates, and digit strings Python's ISO parser would also accept.
    st.integers(1_790_000_000, 1_800_000_000_000).map(str),
    moments.map(lambda moment: moment.strftime("%Y%m%d")),
    moments.map(lambda moment: moment.strftime("%Y%m%d%H%M%S")),
    st.sampled_from(["1701011200000", "2026112001030", "20261120110"]),
    moments.map(lambda moment: f"{moment.year}年{moment.month}月{moment.day}日 {moment:%H:%M:%S}"),
    moments.map(lambda moment: moment.strftime("%Y.%m.%d %H:%M")),
    st.text(max_size=12),
)


@PROPERTY
@given(st.lists(st.tuples(date_value, date_value), max_size=20), windows, zones, st.booleans())
def test_window_test_decides_as_classify(rows: list[tuple[Any, Any]], window: Window, tz: Any, in_zone: bool) -> None:
    window = window.in_zone(tz) if in_zone else window
    expected = [classify({"aae397": a, "Collect_time": b}, RULE, window, tz) for a, b in rows]
    assert WindowTest(RULE, window, tz).verdicts(rows) == expected


def _record(offset: int, date: Any, key: Any = "absent") -> dict[str, Any]:
    record = {"aae397": date, "title": "数据工程师", "n": offset}
    if key != "absent":
        record["id"] = key
    return record


records = st.lists(
    st.builds(_record, st.integers(0, 10), date_value, st.one_of(st.just("absent"), st.none(), st.just(""), st.text())),
    max_size=12,
)


@PROPERTY
@given(records, st.sampled_from(["id", None]))
def test_a_page_with_decoded_fields_gives_the_messages_of_its_raw_records(page: list[dict[str, Any]], key_field):
    raw = [msgspec.Raw(msgspec.json.encode(r)) for r in page]
    fields = head_fields(RULE.fields, key_field)
    heads = [tuple(r.get(f) for f in fields) for r in page]
    window = Window.since(REF, days=7, now=REF).in_zone(RULE.tz)

    plain = build_messages(raw, 100, RULE, window, key_field, HEADERS)
    fast = build_messages(Page(raw, fields, heads), 100, RULE, window, key_field, HEADERS)

    assert fast == plain


def test_the_page_decode_reads_the_filter_fields_of_each_record() -> None:
    body = msgspec.json.encode({"data": {"data": [_record(0, "2026-11-20 10:00:00", "j0"), _record(1, None)]}})
    hook = SourceApiHook(SourceConfig(), "t", "t", head_fields(RULE.fields, "id"))

    page = hook.read_page(body)

    assert [msgspec.json.decode(r) for r in page] == [_record(0, "2026-11-20 10:00:00", "j0"), _record(1, None)]
    assert (page.fields, page.heads) == (
        ("aae397", "Collect_time", "id"),
        [("2026-11-20 10:00:00", None, "j0"), (None, None, None)],
    )


def test_a_record_that_is_not_an_object_is_named_by_its_offset() -> None:
    body = b'{"data": {"data": [{"aae397": "2026-11-20 10:00:00"}, 42]}}'
    page = SourceApiHook(SourceConfig(), "t", "t", head_fields(RULE.fields, "id")).read_page(body)

    assert page.heads is None
    with pytest.raises(ValueError, match="source offset 8 is not a JSON object"):
        build_messages(page, 7, RULE, Window.since(REF, days=7, now=REF), "id", HEADERS)
