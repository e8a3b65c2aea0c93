"""Unit and property tests of crawler_ops.hooks.source.paging: templates, the requests of a batch under each paginator
(checked against a model source that numbers its pages), and the probe of a total without a count endpoint."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.paging import (
    PageCall,
    Paging,
    join_pages,
    probe_total,
    read_call,
    render,
    render_json,
    template_values,
)
from crawler_ops.hooks.source.responses import PageTooLongError
from crawler_ops.planning import iter_plan

PROPERTY = settings(max_examples=200, deadline=None)
REF = datetime(2026, 11, 1, 4, tzinfo=UTC)
VALUES = template_values("jobs", REF, (REF - timedelta(days=7), REF), timezone(timedelta(hours=8)))


def paging(batch_size: int = 100, **source: Any) -> Paging:
    return Paging(SourceConfig(**source), batch_size, VALUES)


def page_paging(batch_size: int, first_page: int, size_param: str | None) -> Paging:
    paginator = {"type": "page", "first_page": first_page, "size_param": size_param}
    return paging(batch_size, paginator=paginator)


# --------------------------------------------------------------------------- templates


def test_a_template_that_is_one_placeholder_keeps_its_type_and_text_around_it_makes_text() -> None:
    values = {**VALUES, "offset": 200, "limit": 100}

    assert render("{offset}", values) == 200
    assert render("o{offset}", values) == "o200"
    assert render("{offset:05d}", values) == "00200"
    assert render("{{literal}} {limit}", values) == "{literal} 100"
    assert render("{window_start}", values) == "2026-10-25T12:00:00+08:00", "a time alone is ISO 8601 text"
    assert render("{window_start:%Y-%m-%d %H:%M}", values) == "2026-10-25 12:00", "in the source's zone"
    assert render("/api/{task}/search", values) == "/api/jobs/search"


def test_a_json_body_renders_its_strings_and_keeps_numbers_lists_and_keys() -> None:
    body = {"from": "{offset}", "size": "{limit}", "filter": {"since": "{window_start:%Y-%m-%d}", "tags": ["a", 1]}}

    assert render_json(body, {**VALUES, "offset": 0, "limit": 50}) == {
        "from": 0,
        "size": 50,
        "filter": {"since": "2026-10-25", "tags": ["a", 1]},
    }


# --------------------------------------------------------------------------- requests of a batch


def test_an_offset_paginator_asks_one_request_with_offset_and_limit_as_today() -> None:
    (call,) = paging().calls(200, 300)

    assert (call.send.path, call.send.params, call.send.method, call.send.body) == (
        "/api/jobs/list",
        {"offset": 200, "limit": 100},
        "GET",
        None,
    )
    assert (call.skip, call.take, call.most, call.size_param, call.where) == (
        0,
        100,
        100,
        "limit",
        "offsets [200, 300)",
    )


def test_a_post_search_sends_its_body_and_headers_and_no_default_query() -> None:
    request = {
        "method": "POST",
        "path": "/api/{task}/search",
        "headers": {"X-Window": "{window_start:%Y-%m-%d}"},
        "body": {"offset": "{offset}", "limit": "{limit}"},
    }
    (call,) = paging(request=request).calls(200, 250)

    assert (call.send.path, call.send.params) == ("/api/jobs/search", {})
    assert call.send.method == "POST" and call.send.body == {"offset": 200, "limit": 50}
    assert call.send.headers == {"X-Window": "2026-10-25"}


@pytest.mark.parametrize(
    ("lo", "hi", "pages"),
    [
        (200, 300, [(3, 100, 0, 100)]),  # a whole page
        (200, 250, [(5, 50, 0, 50)]),  # the newest partial page: one page of its own size
        (1234, 1235, [(1235, 1, 0, 1)]),  # a window probe's one record
        (250, 300, [(6, 50, 0, 50)]),  # above a watermark inside a page, where its size divides the offset
        (230, 300, [(3, 100, 30, 70)]),  # where it does not: the page of batch_size holding it
        (150, 250, [(2, 100, 50, 50), (3, 100, 0, 50)]),  # a batch planned by offsets: the two pages holding it
    ],
    ids=["whole", "newest-partial", "one-record", "above-watermark", "inside-a-page", "straddling"],
)
def test_a_page_paginator_with_a_size_parameter_asks_the_pages_holding_the_batch(lo, hi, pages) -> None:
    calls = page_paging(100, 1, "page_size").calls(lo, hi)

    assert [(c.send.params["page"], c.send.params["page_size"], c.skip, c.take) for c in calls] == pages


def test_a_fixed_page_size_reads_the_page_holding_the_offsets_and_takes_its_part() -> None:
    calls = page_paging(100, 0, None).calls(1234, 1235)

    assert [(c.send.params, c.skip, c.take, c.most, c.size_param) for c in calls] == [({"page": 12}, 34, 1, 100, None)]


def model_page(total: int, page: int, size: int, first_page: int) -> list[int]:
    """A page-numbered source of records 0..total-1: page ``first_page`` holds the oldest ``size`` records."""
    start = (page - first_page) * size
    return list(range(max(0, start), min(total, start + size))) if page >= first_page else []


def served(call: PageCall, total: int, first_page: int, fixed: int | None) -> list[int]:
    size = fixed if fixed is not None else int(call.send.params["page_size"])
    page = model_page(total, int(call.send.params["page"]), size, first_page)
    return page[call.skip : call.skip + call.take]


@PROPERTY
@given(
    st.integers(0, 5_000),
    st.integers(0, 5_000),
    st.integers(1, 300),
    st.sampled_from([0, 1]),
    st.booleans(),
)
@example(total=250, watermark=0, batch_size=100, first_page=1, fixed=True)
@example(total=350, watermark=250, batch_size=100, first_page=0, fixed=False)
def test_every_planned_batch_reads_exactly_its_records_in_one_page_request(
    total: int, watermark: int, batch_size: int, first_page: int, fixed: bool
) -> None:
    source = page_paging(batch_size, first_page, None if fixed else "page_size")
    plan = list(iter_plan(total, min(watermark, total), batch_size, aligned=True))

    for batch in plan:
        calls = source.calls(batch.lo, batch.hi)
        assert len(calls) == 1, f"batch {batch} is one page"
        records = served(calls[0], total, first_page, batch_size if fixed else None)
        assert records == list(range(batch.lo, batch.hi))


@PROPERTY
@given(st.integers(0, 3_000), st.integers(0, 3_000), st.integers(1, 3_000), st.integers(1, 200), st.booleans())
def test_any_range_reads_exactly_its_records_from_the_pages_holding_it(
    total: int, lo: int, length: int, batch_size: int, fixed: bool
) -> None:
    lo, hi = min(lo, total), min(lo + min(length, batch_size), total)
    if lo >= hi:
        return
    source = page_paging(batch_size, 1, None if fixed else "page_size")
    calls = source.calls(lo, hi)

    records = [r for c in calls for r in served(c, total, 1, batch_size if fixed else None)]
    assert records == list(range(lo, hi))
    assert len(calls) <= 2


# --------------------------------------------------------------------------- reading an answer


def body(records: list[dict[str, Any]]) -> bytes:
    return msgspec.json.encode({"data": {"data": records}})


def test_an_answer_is_sliced_to_the_batch_with_the_fields_of_its_records() -> None:
    (call,) = page_paging(4, 1, None).calls(6, 7)
    page = read_call(body([{"id": i} for i in range(4, 8)]), call, "data.data", ("id",), "label")

    assert [msgspec.json.decode(r) for r in page] == [{"id": 6}] and page.heads == [(6,)]
    assert [msgspec.json.decode(r) for r in join_pages([page, page])] == [{"id": 6}, {"id": 6}]


def test_a_fixed_size_page_longer_than_batch_size_fails_for_good_naming_batch_size() -> None:
    (call,) = page_paging(4, 1, None).calls(0, 4)

    with pytest.raises(SourceError, match=r"fixed page size is larger than batch_size \(4\)") as raised:
        read_call(body([{"id": i} for i in range(5)]), call, "data.data", (), "label")
    assert not raised.value.retriable


def test_a_page_longer_than_the_size_it_was_sent_is_the_source_ignoring_the_parameter() -> None:
    (call,) = page_paging(4, 1, "per_page").calls(0, 4)

    with pytest.raises(PageTooLongError) as raised:
        read_call(body([{"id": i} for i in range(5)]), call, "data.data", (), "label")
    assert raised.value.param == "per_page"


# --------------------------------------------------------------------------- the total without a count endpoint


class ModelSource:
    """Pages of ``size`` records over a total that may grow by ``growth`` records at each read."""

    def __init__(self, total: int, size: int, growth: int = 0, serves: int | None = None) -> None:
        self.total, self.size, self.growth = total, size, growth
        self.serves = size if serves is None else serves  # the source's own (smaller) page size
        self.reads: list[int] = []
        self.totals = [total]

    def read(self, offset: int, size: int) -> range:
        assert size == self.size and offset % size == 0 and offset >= 0, f"read({offset}, {size})"
        index = offset // size
        self.reads.append(index)
        count = len(range(index * self.serves, min(self.total, (index + 1) * self.serves)))
        self.total += self.growth
        self.totals.append(self.total)
        return range(max(0, count))


@PROPERTY
@given(st.integers(0, 10**7), st.integers(1, 1_000))
@example(total=0, size=1)
@example(total=100, size=100)
@example(total=101, size=100)
@example(total=10**6, size=100)
def test_the_probed_total_is_exact_in_about_two_log_pages_reads(total: int, size: int) -> None:
    source = ModelSource(total, size)

    assert probe_total(source.read, size, "task t") == total
    pages = total // size + 1
    assert len(source.reads) <= 2 * pages.bit_length() + 3


@PROPERTY
@given(st.integers(0, 10**7), st.integers(1, 1_000), st.integers(0, 2 * 10**7))
@example(total=1_050, size=100, known=1_000)
@example(total=1_000, size=100, known=1_050)
@example(total=0, size=10, known=500)
@example(total=99, size=100, known=0)
def test_a_probe_from_a_known_total_is_exact_in_about_two_log_changed_pages_reads(
    total: int, size: int, known: int
) -> None:
    source = ModelSource(total, size)

    assert probe_total(source.read, size, "task t", known) == total
    moved = abs(total // size - known // size) + 1
    assert len(source.reads) <= 2 * moved.bit_length() + 3


def test_a_total_that_moved_within_its_page_costs_three_reads() -> None:
    source = ModelSource(1_050, 100)

    assert probe_total(source.read, 100, "task t", known=1_020) == 1_050
    assert source.reads == [10, 9, 11], "its page, the full one below, the empty one above"


@PROPERTY
@given(st.integers(0, 10**5), st.integers(1, 200), st.integers(1, 500), st.integers(0, 2 * 10**5))
@example(total=1_000, size=100, growth=1, known=950)
def test_a_total_growing_during_the_probe_is_one_it_had_meanwhile(
    total: int, size: int, growth: int, known: int
) -> None:
    source = ModelSource(total, size, growth)

    found = probe_total(source.read, size, "task t", known)

    assert source.totals[0] <= found <= source.totals[-1]


@given(st.integers(2, 10_000), st.integers(2, 100))
def test_a_source_serving_smaller_pages_than_asked_is_found_out(total: int, size: int) -> None:
    serves = size - 1
    if total <= serves:  # one short page holds everything: nothing tells
        return
    with pytest.raises(SourceError, match=f"task t: probing the total .* holds {serves}.* set batch_size") as raised:
        probe_total(ModelSource(total, size, serves=serves).read, size, "task t")
    assert not raised.value.retriable


def test_the_probe_reads_pages_galloping_then_bisecting() -> None:
    source = ModelSource(1_050, 100)

    assert probe_total(source.read, 100, "task t") == 1_050
    assert source.reads == [0, 1, 3, 7, 15, 11, 9, 10, 11]


def test_pages_of_a_batch_plan_are_contiguous_with_the_plan() -> None:
    plan = list(iter_plan(1_050, 0, 100, aligned=True))

    assert [(b.lo, b.hi) for b in plan][:2] == [(1_000, 1_050), (900, 1_000)]
    assert all(a.lo == b.hi for a, b in itertools.pairwise(plan))


@pytest.mark.parametrize("paginator", [{"type": "offset"}, {"type": "page"}, {"type": "page", "size_param": None}])
def test_no_offsets_asked_for_read_nothing(paginator: dict[str, Any]) -> None:
    calls = paging(paginator=paginator).calls(200, 200)

    assert all(c.take == 0 for c in calls)
    assert join_pages([]) == []
