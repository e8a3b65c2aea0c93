"""Unit tests of the answer shapes besides a JSON envelope: a bare JSON list (``records_path: ''``), JSON Lines, a
total in a response header, a feed's ``has_more`` flag; and what the config refuses about them, naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from crawler_ops.config import CrawlTaskConfig, SourceConfig
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.feed import HeadedBody, read_feed
from crawler_ops.hooks.source.paging import Paging, template_values
from crawler_ops.hooks.source.responses import decode_page, header_total, lines_as_array
from crawler_ops.ops.source_check import records_at

BASE = "http://api.example.com"
REF = datetime(2026, 11, 1, tzinfo=UTC)
records = st.lists(
    st.dictionaries(st.text(max_size=5), st.none() | st.integers() | st.text(max_size=8), max_size=3), max_size=20
)


def task(source: dict[str, Any]) -> CrawlTaskConfig:
    kafka = {"topic": "jobs", "key_field": "id"}
    return CrawlTaskConfig.model_validate({"id": "jobs", "kafka": kafka, "source": source})


# --------------------------------------------------------------------------- a bare list


@pytest.mark.parametrize("path", ["", "."])
def test_an_empty_or_dot_records_path_is_the_body_itself(path):
    source = SourceConfig(records_path=path)
    assert source.records_path == ""
    page = decode_page(b'[{"id": 1, "d": "x"}, {"id": 2}]', source.records_path, ("d",), limit=2)
    assert [msgspec.json.decode(r) for r in page] == [{"id": 1, "d": "x"}, {"id": 2}]
    assert page.heads == [("x",), (None,)]
    assert records_at([{"id": 1}], source.records_path) == [{"id": 1}]


@pytest.mark.parametrize("path", ["data..items", ".data", "data.", "da ta", "data.\n"])
def test_a_records_path_with_an_empty_step_or_a_space_is_refused_naming_it(path):
    with pytest.raises(ValidationError, match="records_path") as caught:
        SourceConfig(records_path=path)
    assert "not a dotted path" in str(caught.value)


def test_a_bare_list_longer_than_asked_stops_at_the_record_past_the_limit():
    with pytest.raises(ValueError, match="more than 2 records"):
        decode_page(b'[{"a":1},{"a":2},{"a":3},' + b"x" * 100, "", (), limit=2)


# --------------------------------------------------------------------------- JSON Lines


@given(records)
@settings(max_examples=200, deadline=None)
def test_json_lines_read_as_the_same_records_in_order(items):
    body = b"".join(msgspec.json.encode(item) + b"\r\n\n" for item in items)
    assert msgspec.json.decode(lines_as_array(body, "t")) == items


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (b'{"a":1}\n1,2\n', 2),  # two values on one line
        (b'{"a":1}\n{"a": 2} {"a": 3}\n', 2),
        (b'"abc\ndef"\n', 1),  # a string broken over two lines
        (b'{"a":1}\n{"a":', 2),  # a truncated body
        (b"[1,\n2]\n", 1),
    ],
)
def test_a_line_that_is_not_exactly_one_json_value_fails_naming_it(body, line):
    with pytest.raises(SourceError, match=f"line {line} is not one JSON value") as caught:
        lines_as_array(body, "task t: GET /p")
    assert caught.value.retriable, "read again, as a truncated body is"


def test_json_lines_refuse_a_records_path_and_a_feed_that_names_its_next_page_in_the_body():
    assert task({"records_format": "jsonl"}).source.records_path == ""
    with pytest.raises(ValidationError, match=r"records_path 'data\.items': a JSON Lines body"):
        task({"records_format": "jsonl", "records_path": "data.items"})
    with pytest.raises(ValidationError, match="a cursor feed reads the next page from the body"):
        task({"records_format": "jsonl", "paginator": {"type": "cursor"}, "count_path": None})
    with pytest.raises(ValidationError, match="has_more_path 'more': a JSON Lines body"):
        task({"records_format": "jsonl", "paginator": {"type": "header_cursor", "has_more_path": "more"}})
    assert task({"records_format": "jsonl", "paginator": {"type": "link_header"}}).source.paginator.crawl == "feed"


# --------------------------------------------------------------------------- a total in a header


def counted(body: bytes, **headers: list[str]) -> HeadedBody:
    return HeadedBody.of(body, {name.replace("_", "-"): values for name, values in headers.items()})


def test_a_total_is_read_from_its_header_of_the_count_answer():
    assert header_total(counted(b"[]", x_total_count=[" 1234 "]), "X-Total-Count", "t") == 1234
    assert header_total(counted(b"", x_total_count=["7", "7"]), "X-Total-Count", "t") == 7, "repeated alike"


@pytest.mark.parametrize("values", [[], ["-1"], ["1.5"], ["12abc"], ["1", "2"], ["٣"], ["9" * 19]])
def test_a_missing_or_unusable_total_header_fails_for_good_naming_it(values):
    with pytest.raises(SourceError, match="X-Total-Count") as caught:
        header_total(counted(b"", x_total_count=values), "X-Total-Count", "task t")
    assert not caught.value.retriable


def test_the_count_request_keeps_the_total_header_and_a_header_needs_a_count_request():
    source = SourceConfig(count_path="/api/{task}/list?offset=0&limit=1", total_header="X-Total-Count")
    values = template_values("jobs", REF, (REF - timedelta(days=7), REF), UTC)
    send, _ = Paging(source, 100, values).count_request() or (None, None)
    assert send is not None and send.answer_headers == ("x-total-count",)
    assert send.httpx()["params"] is None, "the query written in count_path is sent as written"
    with pytest.raises(ValidationError, match="total_header X-Total-Count: the total is read from the answer to"):
        SourceConfig(count_path=None, total_header="X-Total-Count")
    with pytest.raises(ValidationError, match="total_header"):
        SourceConfig(total_header="X Total\r\nCount")


# --------------------------------------------------------------------------- has_more


def has_more_source(**paginator: Any) -> SourceConfig:
    kind = {"type": "cursor", "cursor_path": "data.next", "has_more_path": "data.has_more", **paginator}
    return SourceConfig(page_path="/feed", count_path=None, paginator=kind)


def test_has_more_false_ends_the_feed_whatever_position_the_page_names():
    source = has_more_source()
    body = b'{"data": {"data": [{"id": 1}], "next": "c2", "has_more": %s}}'
    assert read_feed(body % b"true", source, (), BASE, "t").next == "c2"
    assert read_feed(body % b"false", source, (), BASE, "t").next is None


@pytest.mark.parametrize("value", [b"null", b'"false"', b"0", b"[]"])
def test_a_page_without_a_boolean_at_has_more_path_fails_for_good_naming_it(value):
    body = b'{"data": {"data": [{"id": 1}], "next": "c2", "has_more": %s}}' % value
    with pytest.raises(SourceError, match=r"has_more_path 'data\.has_more'") as caught:
        read_feed(body, has_more_source(), (), BASE, "task t")
    assert not caught.value.retriable
    with pytest.raises(SourceError, match="not true or false"):
        read_feed(b'{"data": {"data": []}}', has_more_source(), (), BASE, "task t")
