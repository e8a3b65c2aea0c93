"""Unit tests of pages read in parts: the parts of a request (crawler_ops.hooks.source.paging.Paging.parts, property
tested: they read exactly what it takes, in order, each a whole page at its own number) and the hook reading a page too
large in parts, joined in order, with a scripted transport (crawler_ops.hooks.source.parts)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source import hook as source_module
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.source.paging import PageCall, Paging
from tests.unit.hooks.mock_http import route_clients

PROPERTY = settings(max_examples=300, deadline=None)


def paging(batch_size: int, **source: Any) -> Paging:
    return Paging.outside_a_run(SourceConfig.model_validate(source), "jobs", batch_size)


def offsets(call: PageCall) -> range:
    """The offsets a call takes."""
    return range(call.start + call.skip, call.start + call.skip + call.take)


def assert_parts_read_what_the_call_takes(pages: Paging, call: PageCall) -> None:
    assert pages.whole(call) is None
    parts = pages.parts(call)
    taken = [offset for part in parts for offset in offsets(part)]
    assert taken == list(offsets(call)), "every offset once, in order"
    assert all(part.most < call.most for part in parts), "each part asks fewer records"
    for part in parts:
        if part.send.params.get("page") is not None:  # a page paginator: a whole page at its own number
            size = part.send.params["page_size"]
            assert part.start % size == 0 and part.send.params["page"] == part.start // size + 1
            assert part.most == size


@PROPERTY
@given(st.integers(0, 10_000), st.integers(2, 1_000))
def test_an_offset_request_has_two_halves_reading_exactly_its_offsets(lo, size):
    pages = paging(size)
    (call,) = pages.calls(lo, lo + size)
    assert_parts_read_what_the_call_takes(pages, call)
    assert len(pages.parts(call)) == 2


@PROPERTY
@given(st.integers(0, 200), st.integers(2, 300), st.data())
def test_a_page_request_has_smaller_whole_pages_reading_exactly_what_it_takes(index, size, data):
    pages = paging(size, paginator={"type": "page"})
    lo = index * size + data.draw(st.integers(0, size - 1))
    hi = data.draw(st.integers(lo + 1, (index + 1) * size))
    for call in pages.calls(lo, hi):
        if call.most > 1:  # a one-record read (the window search's) is one record of a page of one
            assert_parts_read_what_the_call_takes(pages, call)


def test_parts_go_down_to_one_record_and_not_below():
    pages = paging(8, paginator={"type": "page"})
    (call,) = pages.calls(16, 24)
    sizes = []
    while pages.whole(call) is None:
        sizes.append(len(parts := pages.parts(call)))
        call = parts[0]
    assert sizes == [2, 2, 2] and call.most == 1 and pages.whole(call) == "it is a single record"
    (odd,) = paging(6, paginator={"type": "page"}).calls(6, 12)
    assert [p.most for p in paging(6, paginator={"type": "page"}).parts(odd)] == [3, 3]


def test_a_fixed_page_size_has_no_parts_and_says_why():
    pages = paging(100, paginator={"type": "page", "size_param": None})
    (call,) = pages.calls(0, 100)
    assert "fixed size (paginator.size_param is null)" in str(pages.whole(call))


# --------------------------------------------------------------------------- through the hook


class TooLargeOver:
    """Answers ``offset``/``limit`` pages of records ``{"id": offset}``; a page of more than ``most`` records is
    padded past the hook's size cap."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.asked: list[tuple[int, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        self.asked.append((offset, limit))
        records = [{"id": i} for i in range(offset, offset + limit)]
        pad = " " * (20_000 if limit > self.most else 0)
        return httpx.Response(200, content=msgspec.json.encode({"data": {"data": records}, "pad": pad}))


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch, airflow_connection: Callable[..., None]) -> Callable[[Any], None]:
    airflow_connection("src", conn_type="http", host="source.test", schema="http")
    clock = {"sleep": staticmethod(lambda s: None), "monotonic": staticmethod(time.monotonic)}
    monkeypatch.setattr(source_module, "time", type("Clock", (), clock))
    return lambda handler: route_clients(monkeypatch, handler)


def test_a_page_too_large_is_read_in_halves_joined_in_order(routed, caplog):
    source = TooLargeOver(most=3)
    routed(source)
    hook = SourceApiHook(SourceConfig(conn_id="src", max_response_mb=0.01), "jobs", "remote_jobs")

    page = hook.get_page(100, 10)

    assert [msgspec.json.decode(r)["id"] for r in page] == list(range(100, 110))
    assert source.asked == [(100, 10), (100, 5), (100, 2), (102, 3), (105, 5), (105, 2), (107, 3)]
    assert "offsets [100, 110): response of 20" in caplog.text
    assert (
        "exceeds source.max_response_mb; reading it in 2 parts: offsets [100, 105), offsets [105, 110)" in caplog.text
    )


def test_one_record_still_too_large_fails_as_before_saying_why_it_is_not_split(routed):
    routed(TooLargeOver(most=0))
    hook = SourceApiHook(SourceConfig(conn_id="src", max_response_mb=0.01), "jobs", "remote_jobs")

    with pytest.raises(
        SourceError,
        match=r"offsets \[6, 7\): response of \d+ bytes exceeds .* not read in parts: it is a single record",
    ):
        hook.get_page(6, 2)


def test_a_page_every_part_of_which_is_too_large_stops_at_the_budget_of_requests(routed):
    # Every request of more than one record is too large: unbounded, a batch of 100 would take 199 requests.
    source = TooLargeOver(most=1)
    routed(source)
    hook = SourceApiHook(SourceConfig(conn_id="src", max_response_mb=0.01, max_part_requests=10), "jobs", "remote_jobs")

    with pytest.raises(
        SourceError, match=r"read in parts, it took 10 requests .* past source.max_part_requests \(10\)"
    ):
        hook.get_page(0, 100)

    assert len(source.asked) == 11, "the page whole, then ten parts"
    assert source.asked[0] == (0, 100)


def test_parts_stop_at_the_budget_of_time_whatever_is_left_of_requests(routed):
    slow = TooLargeOver(most=1)

    def answer(request: httpx.Request) -> httpx.Response:
        time.sleep(0.2)
        return slow(request)

    routed(answer)
    cfg = SourceConfig(conn_id="src", max_response_mb=0.01, parts_budget_s=1.0, max_part_requests=1000)
    hook = SourceApiHook(cfg, "jobs", "remote_jobs")

    started = time.monotonic()
    with pytest.raises(SourceError, match=r"source.parts_budget_s \(1s\)") as failed:
        hook.get_page(0, 100)

    assert failed.value.retriable and time.monotonic() - started < 3.0
    assert len(slow.asked) < 10
