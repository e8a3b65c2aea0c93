"""The requests of a window's filtered view (crawler_ops.hooks.source.paging with source.window_filter): the filter's
parameters on every page and on the count, nothing of them on unfiltered requests; the check of a filtered page;
and the arithmetic of a first crawl's counted window start against a model of an appending source."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.config import SourceConfig
from crawler_ops.crawl.window import window_start
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.paging import Paging, template_values

REF = datetime(2026, 11, 1, 4, tzinfo=UTC)
VALUES = template_values("jobs", REF, (REF - timedelta(days=3), REF), timezone(timedelta(hours=8)))
BOUNDS = {"from": "{window_start:%Y-%m-%d %H:%M:%S}", "to": "{window_end:%Y-%m-%d %H:%M:%S}"}
SENT = {"from": "2026-10-29 12:00:00", "to": "2026-11-01 12:00:00"}


def paging(filtered: bool = True, **source: Any) -> Paging:
    return Paging(SourceConfig(**source), 100, VALUES, filtered)


def test_a_filtered_page_request_adds_the_window_to_the_paginators_query() -> None:
    (call,) = paging(window_filter={"query": BOUNDS}).calls(200, 300)

    assert call.send.params == {"offset": 200, "limit": 100, **SENT}


def test_an_unfiltered_request_of_the_same_source_sends_no_window() -> None:
    source = {"window_filter": {"query": BOUNDS}}
    (call,) = paging(False, **source).calls(200, 300)

    assert call.send.params == {"offset": 200, "limit": 100}
    assert paging(False, **source).count_request() == (paging(False).count_request())


def test_the_filtered_count_asks_the_count_path_with_the_window() -> None:
    count = paging(window_filter={"query": BOUNDS}).count_request()

    assert count is not None
    send, total_path = count
    assert (send.path, dict(send.params), total_path) == ("/api/jobs/count", SENT, "data.total")


def test_the_filtered_count_may_have_its_own_path_query_and_total_path() -> None:
    window = {
        "query": BOUNDS,
        "count_path": "/api/{task}/window",
        "count_query": {"since": "{window_start:%Y}", "until": "{window_end:%Y}"},
        "total_path": "hits.total",
    }
    count = paging(window_filter=window).count_request()

    assert count is not None
    assert (count[0].path, dict(count[0].params), count[1]) == (
        "/api/jobs/window",
        {"since": "2026", "until": "2026"},
        "hits.total",
    )


def test_without_any_count_path_the_filtered_total_is_probed() -> None:
    assert paging(count_path=None, window_filter={"query": BOUNDS}).count_request() is None


def test_a_post_search_merges_the_window_into_its_body() -> None:
    source = {
        "request": {"method": "POST", "body": {"offset": "{offset}", "limit": "{limit}"}},
        "window_filter": {"body": {"range": {"gte": "{window_start}", "lt": "{window_end}"}}, "count_query": BOUNDS},
    }
    (call,) = paging(**source).calls(0, 100)

    window = {"gte": "2026-10-29T12:00:00+08:00", "lt": "2026-11-01T12:00:00+08:00"}
    assert call.send.body == {"offset": 0, "limit": 100, "range": window}
    (plain,) = paging(False, **source).calls(0, 100)
    assert plain.send.body == {"offset": 0, "limit": 100}


def test_a_short_page_of_a_filtered_view_fails_naming_the_task_window_and_offsets() -> None:
    view = paging(window_filter={"query": BOUNDS})
    view.check_view_page(100, 0, 100, "jobs")
    paging(False, window_filter={"query": BOUNDS}).check_view_page(3, 0, 100, "jobs")

    with pytest.raises(SourceError) as failed:
        view.check_view_page(99, 200, 300, "jobs")

    assert not failed.value.retriable
    assert str(failed.value).startswith(
        "task jobs: window filter: the source counts at least 300 records dated in [2026-10-29T12:00:00+08:00, "
        "2026-11-01T12:00:00+08:00), but its page of offsets [200, 300) of that filtered view holds 99 records "
        "instead of 100"
    )


@settings(max_examples=300, deadline=None)
@given(
    old=st.integers(0, 500),
    new=st.integers(0, 500),
    before=st.integers(0, 200),
    between=st.integers(0, 200),
    after=st.integers(0, 200),
)
def test_a_counted_window_start_loses_nothing_and_reads_nothing_twice_whatever_is_appended_around_the_counts(
    old: int, new: int, before: int, between: int, after: int
) -> None:
    """A source of ``old`` records older than the window then ``new`` in it; ``before`` records are appended
    before the total is counted, ``between`` between the total and the window's count, ``after`` after both. The
    first crawl reads [start, T), the next run [T, end): every record of the window is read exactly once, and the
    start is never above the first record of the window."""
    total = old + new + before
    count = new + before + between
    start = window_start(total, count)
    end = total + between + after
    in_window = set(range(old, end))
    first, following = set(range(start, total)), set(range(total, end))

    assert start <= old
    assert in_window <= first | following
    assert not first & following
    assert old - start == min(between, old), "the older records read in vain are the ones appended between the counts"
