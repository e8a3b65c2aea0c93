"""Unit tests of crawler_ops.hooks.source.feed: the same-host rule of next links, a feed page's request (the first
page without a cursor) and where its answer names the next page."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import settings

from crawler_ops.config import SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.feed import HeadedBody, feed_send, on_host, read_feed
from crawler_ops.hooks.source.paging import Paging, template_values

PROPERTY = settings(max_examples=300, deadline=None)
BASE = "http://api.example.com:8080"
REF = datetime(2026, 11, 1, tzinfo=UTC)


def feed_paging(batch_size: int = 50, **source: Any) -> Paging:
    values = template_values("jobs", REF, (REF - timedelta(days=7), REF), UTC)
    return Paging(SourceConfig(page_path="/api/{task}/feed", **source), batch_size, values)


def test_a_next_link_on_the_connections_host_is_followed_whole_or_relative():
    assert on_host("/api/jobs/feed?before=o5", BASE, "task t") == f"{BASE}/api/jobs/feed?before=o5"
    assert on_host("HTTP://API.example.com:8080/x?y=1", BASE, "task t") == "http://API.example.com:8080/x?y=1"


@pytest.mark.parametrize(
    "link", ["http://evil.example/x", "http://api.example.com/x", "https://api.example.com:8080/x", "//evil.example/x"]
)
def test_a_next_link_to_another_host_port_or_scheme_is_refused_naming_it(link):
    with pytest.raises(SourceError, match="refused") as caught:
        on_host(link, BASE, "task t")
    assert not caught.value.retriable
    assert link.split("//")[1].split("/")[0] in str(caught.value)


def test_the_first_cursor_page_sends_no_cursor_the_next_ones_do():
    paging = feed_paging(paginator={"type": "cursor"})
    first, second = feed_send(paging, None, BASE, "t"), feed_send(paging, "tok 1", BASE, "t")
    assert (first.path, dict(first.params)) == ("/api/jobs/feed", {"limit": 50})
    assert dict(second.params) == {"cursor": "tok 1", "limit": 50}


def test_a_cursor_in_a_post_body_is_null_on_the_first_page():
    request = {"method": "POST", "body": {"after": "{cursor}", "size": "{limit}", "q": "{task}"}}
    paging = feed_paging(paginator={"type": "cursor"}, request=request)
    assert feed_send(paging, None, BASE, "t").body == {"after": None, "size": 50, "q": "jobs"}
    assert feed_send(paging, "abc", BASE, "t").body == {"after": "abc", "size": 50, "q": "jobs"}


def test_a_link_paginator_gets_the_next_page_by_its_url_and_keeps_the_link_headers():
    paging = feed_paging(paginator={"type": "link_header"}, request={"headers": {"X-Task": "{task}"}})
    first, later = feed_send(paging, None, BASE, "t"), feed_send(paging, f"{BASE}/p?before=o9", BASE, "t")
    assert first.answer_headers == ("link",) and dict(first.params) == {"limit": 50}
    assert (later.method, later.path, dict(later.params), later.answer_headers) == (
        "GET",
        f"{BASE}/p?before=o9",
        {},
        ("link",),
    )
    assert later.headers == {"X-Task": "jobs"}
    with pytest.raises(SourceError, match="evil"):
        feed_send(paging, "http://evil/p", BASE, "t")


def body(next_field: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"data": {"data": [{"id": "a"}, {"id": "b"}], **next_field}})


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"next_cursor": "c2"}, "c2"),
        ({"next_cursor": None}, None),
        ({"next_cursor": ""}, None),
        ({}, None),
        ({"next_cursor": 7}, "7"),
    ],
)
def test_a_missing_null_or_empty_cursor_ends_the_feed(answer, expected):
    source = SourceConfig(paginator={"type": "cursor", "cursor_path": "data.next_cursor"})
    page = read_feed(body(answer), source, ("id",), BASE, "t")
    assert len(page.records) == 2 and page.next == expected


def test_next_links_are_read_from_the_body_or_the_link_header_and_checked():
    in_body = SourceConfig(paginator={"type": "next_link", "next_path": "data.next"})
    assert read_feed(body({"next": "/p?b=1"}), in_body, (), BASE, "t").next == f"{BASE}/p?b=1"
    with pytest.raises(SourceError, match="elsewhere"):
        read_feed(body({"next": "https://elsewhere/p"}), in_body, (), BASE, "t")
    in_header = SourceConfig(paginator={"type": "link_header"})
    linked = HeadedBody.of(body({}), {"link": ['</p?b=2>; rel="next"']})
    assert read_feed(linked, in_header, (), BASE, "t").next == f"{BASE}/p?b=2"
    assert read_feed(HeadedBody.of(body({}), {}), in_header, (), BASE, "t").next is None


@pytest.mark.parametrize(
    ("position", "says"),
    [
        (b'"' + b"c" * 30_000_000 + b'"', "is 30,000,000 characters long, more than 8,192; not followed nor stored"),
        (b"9" * 9000, "is 9,000 characters long, more than 8,192"),
    ],
    ids=["30-MB-cursor", "9000-digit-cursor"],
)
def test_a_hostile_cursor_fails_for_good_naming_what_is_wrong(position, says):
    source = SourceConfig(paginator={"type": "cursor", "cursor_path": "data.next_cursor"})
    page = b'{"data": {"data": [{"id": "a"}], "next_cursor": ' + position + b"}}"

    with pytest.raises(SourceError, match=says) as caught:
        read_feed(page, source, ("id",), BASE, "task t")

    assert not caught.value.retriable and len(str(caught.value)) < 400


@pytest.mark.parametrize(
    ("link", "says"),
    [
        ("http://[::1/p", "is no URL"),
        ("http://api.example.com:99999/p", "is no URL"),
        ("/p?b=1\r\nX-Injected: 1", "a space or a control character"),
        ("/p?b=1 2", "a space or a control character"),
    ],
)
def test_a_hostile_next_link_fails_for_good_as_a_source_error(link, says):
    in_body = SourceConfig(paginator={"type": "next_link", "next_path": "data.next"})

    with pytest.raises(SourceError, match=says) as caught:
        read_feed(body({"next": link}), in_body, (), BASE, "task t")

    assert not caught.value.retriable


def test_a_cursor_beside_many_records_is_read_without_building_them():
    records = [{"id": str(i), "text": "x" * 20} for i in range(200_000)]
    page = msgspec.json.encode({"data": {"data": records, "next_cursor": "c9"}})
    source = SourceConfig(paginator={"type": "cursor", "cursor_path": "data.next_cursor"})

    tracemalloc.start()
    found = source.paginator.next_position(page, {})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert found == "c9" and peak < 2 * 2**20, f"{peak / 2**20:.0f} MiB built to read a cursor"


def test_a_relative_link_header_is_resolved_against_the_request_url_and_a_body_link_against_the_base():
    asked = f"{BASE}/api/jobs/feed?limit=50"
    in_header = SourceConfig(paginator={"type": "link_header"})
    for link, expected in [
        ("?max_id=5", f"{BASE}/api/jobs/feed?max_id=5"),
        ("feed?page=2", f"{BASE}/api/jobs/feed?page=2"),
        ("/v2/feed?p=3", f"{BASE}/v2/feed?p=3"),
    ]:
        answer = HeadedBody.of(body({}), {"link": [f'<{link}>; rel="next"']})
        assert read_feed(answer, in_header, (), BASE, "t", asked).next == expected
    in_body = SourceConfig(paginator={"type": "next_link", "next_path": "data.next"})
    assert read_feed(body({"next": "?b=1"}), in_body, (), BASE, "t", asked).next == f"{BASE}/?b=1"
