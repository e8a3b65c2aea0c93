"""Unit and property tests of a feed walk's stop rule (crawler_ops.crawl.feed.stop_at) and of the mark a plan's
first page sets, over newest-first pages of records with unique keys and dates that never increase."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.crawl.feed import newest, stop_at
from crawler_ops.hooks.source.feed import FeedPage
from crawler_ops.hooks.store.feed_rows import Mark
from crawler_ops.message.filtering import DateRule
from crawler_ops.message.pages import Page

PROPERTY = settings(max_examples=300, deadline=None)
RULE = DateRule(("aae397",), "UTC")
FIELDS = ("aae397", "id")
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def moment(minutes: int) -> datetime:
    return T0 - timedelta(minutes=minutes)


def feed_page(ages: list[int], keys: list[str], more: bool = True) -> FeedPage:
    """Records newest first: record i is ``ages[i]`` minutes before T0 (``ages`` never decreases)."""
    records = [
        msgspec.Raw(msgspec.json.encode({"id": key, "aae397": moment(age).strftime("%Y-%m-%d %H:%M:%S")}))
        for age, key in zip(ages, keys, strict=True)
    ]
    return FeedPage(Page(records), "next-token" if more else None)


@st.composite
def pages(draw: st.DrawFn) -> tuple[list[int], list[str]]:
    steps = draw(st.lists(st.integers(0, 30), max_size=40))
    ages, age = [], draw(st.integers(0, 100))
    for step in steps:
        age += step
        ages.append(age)
    return ages, [f"k{i}" for i in range(len(ages))]


@PROPERTY
@given(pages(), st.data(), st.integers(0, 2_000), st.booleans())
def test_the_walk_stops_at_the_marks_record_and_keeps_every_record_before_it(page, data, window_age, more):
    ages, keys = page
    index = data.draw(st.integers(0, len(ages) - 1)) if ages else None
    mark = None if index is None else Mark(keys[index], moment(ages[index]))
    keep, stop = stop_at(feed_page(ages, keys, more), FIELDS, "id", RULE, mark, moment(window_age))
    assert (keep, stop) == ((index, True) if index is not None else (0, True)), "an empty page ends the walk"


@PROPERTY
@given(pages(), st.integers(0, 2_000), st.integers(0, 2_000), st.booleans())
def test_with_the_marks_record_gone_the_walk_stops_at_the_first_record_older_than_the_marks_date(
    page, mark_age, window_age, more
):
    ages, keys = page
    mark = Mark("deleted-upstream", moment(mark_age))
    keep, stop = stop_at(feed_page(ages, keys, more), FIELDS, "id", RULE, mark, moment(window_age))
    assert keep == sum(age <= mark_age for age in ages), "every record not older than the mark, none older"
    all_old = all(age > window_age for age in ages)  # an empty page too: it ends the walk
    assert stop is (keep < len(ages) or not more or all_old)


@PROPERTY
@given(pages(), st.integers(0, 2_000), st.booleans())
def test_a_first_crawl_reads_on_until_a_page_holds_only_records_older_than_the_window(page, window_age, more):
    ages, keys = page
    keep, stop = stop_at(feed_page(ages, keys, more), FIELDS, "id", RULE, None, moment(window_age))
    assert keep == len(ages)
    assert stop is (not more or not ages or all(age > window_age for age in ages))


def test_a_plans_mark_is_its_first_pages_newest_record():
    assert newest(feed_page([3, 5], ["a", "b"]), FIELDS, "id", RULE) == Mark("a", moment(3))
    assert newest(feed_page([], []), FIELDS, "id", RULE) is None


def test_an_empty_page_ends_the_walk_even_when_it_names_a_next_page():
    # A scroll-style API answers its end with an empty page and a cursor again; walking on would never end.
    assert stop_at(feed_page([], [], more=True), FIELDS, "id", RULE, None, moment(10_000)) == (0, True)
    assert stop_at(feed_page([1], ["a"], more=True), FIELDS, "id", RULE, None, moment(10_000)) == (1, False)
