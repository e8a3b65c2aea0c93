"""Pages checked in a helper process: its answers (UTF-8, the fields of each record), its limits, and the filter
trusting only them."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.crawl import page_check
from crawler_ops.crawl.page_check import PageChecker, write_array
from crawler_ops.hooks.source.responses import PageTooLongError, decode_page
from crawler_ops.message.filtering import DateRule, Window
from crawler_ops.message.pages import Page
from crawler_ops.message.records import HeadReader, build_messages

REF = datetime(2026, 11, 1, tzinfo=UTC)
GOOD = [msgspec.Raw(f'{{"id": "{i}", "title": "高级工程师 {i}"}}'.encode()) for i in range(50)]
# Its title ends with the first two bytes of a three-byte character: invalid in itself, whatever follows it.
CUT = msgspec.Raw('{"id": "cut", "title": "高级'.encode() + b"\xe5\xb7" + b'"}')


@pytest.fixture
def checker():
    with PageChecker("t1") as helper:
        assert helper.running
        yield helper


def test_a_page_whose_records_are_all_utf8_is_marked_checked(checker):
    page = checker.checked(Page(GOOD))
    assert page.utf8_checked and page.heads is None, "a checker without fields reads none"


@pytest.mark.parametrize("where", [0, 25, 50])
def test_one_record_with_a_cut_character_anywhere_leaves_the_page_unchecked(checker, where):
    page = checker.checked(Page([*GOOD[:where], CUT, *GOOD[where:]]))
    assert not page.utf8_checked
    assert checker.running, "an invalid page is an answer, not a failure of the helper"
    good = checker.checked(Page(GOOD))
    assert good.utf8_checked, "a shorter page after a longer one is checked on its own bytes only"


def test_pages_of_more_records_than_one_write_takes_are_checked_whole(checker, monkeypatch):
    monkeypatch.setattr(page_check, "IOV_MAX", 7)
    assert checker.check(GOOD) == (True, None)
    assert checker.check([*GOOD, CUT]) == (False, None)
    assert checker.check([CUT, *GOOD]) == (False, None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_the_helpers_answer_is_whether_every_record_alone_is_utf8(texts):
    # Each record is a whole JSON value, so it starts and ends with an ASCII character, as here.
    records = [msgspec.Raw(b'"' + text + b'"') for text in texts]
    expected = all(is_utf8(bytes(r)) for r in records)
    with PageChecker("t1") as helper:
        assert helper.check(records)[0] is expected


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_a_helper_that_died_leaves_pages_unchecked_from_then_on(checker, caplog):
    assert checker._proc is not None
    os.kill(checker._proc.pid, signal.SIGKILL)
    checker._proc.wait()
    page = checker.checked(Page(GOOD))
    assert not page.utf8_checked and not checker.running
    assert "records are checked in the chunk's process" in caplog.text
    assert not checker.checked(Page(GOOD)).utf8_checked


def test_a_helper_that_does_not_answer_in_time_is_stopped(checker, monkeypatch):
    assert checker._proc is not None
    os.kill(checker._proc.pid, signal.SIGSTOP)
    monkeypatch.setattr(page_check, "ANSWER_BASE_S", 0.2)
    assert checker.check(GOOD) == (False, None)
    assert not checker.running


def test_a_helper_that_cannot_start_checks_nothing(monkeypatch, caplog):
    monkeypatch.setattr(page_check.sys, "executable", "/nonexistent/python")
    with PageChecker("t1") as helper:
        assert not helper.running
        assert helper.check(GOOD) == (False, None)
    assert "could not start it" in caplog.text


def test_without_memory_files_there_is_no_helper_and_the_log_says_why_once(monkeypatch, caplog):
    monkeypatch.delattr(page_check.os, "memfd_create")
    with PageChecker("t1") as helper:
        assert helper.check(GOOD) == (False, None)
        assert not helper.checked(Page(GOOD)).utf8_checked
    assert caplog.text.count("no memory files") == 1


def helper_environment(helper: PageChecker) -> dict[str, str]:
    # Once it answered: until its exec is over, the kernel shows a process's environment empty.
    assert helper.check(GOOD) == (True, None) and helper._proc is not None
    with open(f"/proc/{helper._proc.pid}/environ", "rb") as environ:
        pairs = [item.split(b"=", 1) for item in environ.read().split(b"\0") if item]
    return {name.decode(): value.decode() for name, value in pairs}


def test_the_helper_keeps_its_freed_heap_unless_the_environment_says_otherwise(monkeypatch):
    monkeypatch.delenv("MALLOC_TOP_PAD_", raising=False)
    monkeypatch.setenv("CRAWLER_OPS_SEEN_BY_HELPER", "yes")
    with PageChecker("t1") as helper:
        seen = helper_environment(helper)
    assert seen["MALLOC_TOP_PAD_"] == page_check.HELPER_ENVIRONMENT["MALLOC_TOP_PAD_"] == str(32 * 1024 * 1024)
    assert seen["CRAWLER_OPS_SEEN_BY_HELPER"] == "yes"  # the rest of the parent's environment is passed on
    monkeypatch.setenv("MALLOC_TOP_PAD_", "4096")
    with PageChecker("t1") as helper:
        assert helper_environment(helper)["MALLOC_TOP_PAD_"] == "4096"


@pytest.mark.parametrize("iov_max", [1, 2, 1024])
def test_the_records_are_written_as_one_json_array_from_the_start(monkeypatch, iov_max):
    monkeypatch.setattr(page_check, "IOV_MAX", iov_max)
    fd = os.memfd_create("test")
    try:
        assert write_array(fd, [msgspec.Raw(b'"ab"'), msgspec.Raw(b"1"), msgspec.Raw(b"{}")]) == 11
        assert os.pread(fd, 11, 0) == b'["ab",1,{}]'
        assert write_array(fd, []) == 2
        assert os.pread(fd, 2, 0) == b"[]"
    finally:
        os.close(fd)


def test_the_filter_trusts_a_checked_page_and_checks_every_record_of_an_unchecked_one():
    rule = DateRule(("aae397",), "Asia/Shanghai")
    window = Window.since(REF, days=7, now=REF, tolerance=timedelta(hours=24))
    records = [msgspec.Raw(b'{"id": "bad", "aae397": "2026-10-31 08:00:00", "title": "\xe5\xb7"}')]
    unchecked = build_messages(Page(records), 0, rule, window, "id", [])
    assert [d.offset for d in unchecked.dead_letters] == [0] and not unchecked.messages
    marked = Page(records)
    marked.utf8_checked = True  # only the helper sets this, once it found every byte of the page UTF-8
    trusted = build_messages(marked, 0, rule, window, "id", [])
    assert len(trusted.messages) == 1 and not trusted.dead_letters


FIELDS = ("aae397", "Collect_time", "id")
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from([*FIELDS, "title", "x"]), JSON_VALUES, max_size=5), max_size=12))
def test_the_fields_the_helper_reads_are_those_the_filter_would_read_itself(objects):
    records = [msgspec.Raw(msgspec.json.encode(o)) for o in objects]
    own = HeadReader(FIELDS[:2], "id")
    with PageChecker("t1", own.fields) as helper:
        utf8, heads = helper.check(records)
    assert utf8
    if not all(fits_msgpack(o.get(f)) for o in objects for f in own.fields):
        assert heads is None, "a value msgpack cannot carry: the filter reads the page itself"
    else:
        assert heads == own.read_page(records, 0)


def fits_msgpack(value: object) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**63) <= value < 2**64
    if isinstance(value, list):
        return all(map(fits_msgpack, value))
    if isinstance(value, dict):
        return all(map(fits_msgpack, value.values()))
    return True


def test_a_page_whose_fields_the_helper_cannot_read_is_left_to_the_filter(checker_with_fields):
    not_an_object = [GOOD[0], msgspec.Raw(b"[1, 2]")]
    page = checker_with_fields.checked(Page(not_an_object))
    assert page.utf8_checked and page.heads is None
    with pytest.raises(ValueError, match="the record at source offset 8 is not a JSON object"):
        HeadReader(("aae397",), "id").read_page(page, 7)
    assert checker_with_fields.running, "a page it cannot read is an answer, not a failure"
    read = checker_with_fields.checked(Page(GOOD))
    assert read.fields == ("aae397", "id") and read.heads == [(None, str(i)) for i in range(50)]


@pytest.fixture
def checker_with_fields():
    with PageChecker("t1", ("aae397", "id")) as helper:
        yield helper


def test_a_helper_whose_fields_do_not_match_the_page_is_stopped(checker_with_fields, monkeypatch):
    monkeypatch.setattr(page_check, "_read_heads", lambda payload: [])
    assert checker_with_fields.check(GOOD) == (False, None)
    assert not checker_with_fields.running


def envelope_body(records: list[object], before: object = None, layout: str = "compact") -> bytes:
    """A page's body with its records at ``data.list``; ``before``: another key ahead of them (say, a copy of some);
    ``layout``: compact, spaced (a space after each comma) or indented."""
    document = {"before": before, "data": {"total": len(records), "list": records}, "after": records[:1]}
    if layout == "compact":
        return msgspec.json.encode(document)
    as_json = msgspec.json.decode(msgspec.json.encode(document))  # what JSON can hold (an infinity is null)
    return json.dumps(as_json, ensure_ascii=False, indent=2 if layout == "indented" else None).encode()


@pytest.fixture
def splitter():
    with PageChecker("t1", ("aae397", "id"), "data.list") as helper:
        yield helper


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(["aae397", "id", "title", "x"]), JSON_VALUES, max_size=4), max_size=12),
    st.integers(0, 3),
    st.sampled_from(["compact", "spaced", "indented"]),
)
def test_a_body_split_by_the_helper_gives_the_records_and_fields_of_the_hooks_own_decode(objects, echoed, layout):
    body = envelope_body(objects, objects[:echoed], layout)
    own = decode_page(body, "data.list", ("aae397", "id"))
    with PageChecker("t1", ("aae397", "id"), "data.list") as helper:
        page = helper.split(body)
    assert page is not None and page.utf8_checked
    assert [bytes(r) for r in page] == [bytes(r) for r in own]
    if all(fits_msgpack(o.get(f)) for o in objects for f in ("aae397", "id")):
        assert page.fields == own.fields and page.heads == own.heads
    else:
        assert page.heads is None, "a value msgpack cannot carry: the filter reads the fields itself"


def test_a_split_page_is_not_checked_again(splitter, monkeypatch):
    objects = [{"id": str(i), "title": "高级工程师"} for i in range(50)]
    page = splitter.split(envelope_body(objects))
    assert page is not None and page.utf8_checked and page.heads == [(None, str(i)) for i in range(50)]
    assert [msgspec.json.decode(r) for r in page] == objects
    monkeypatch.setattr(splitter, "check", lambda records: pytest.fail("a split page was checked again"))
    assert splitter.checked(page) is page


def test_a_body_with_a_record_not_utf8_is_split_but_not_marked_checked(splitter):
    records = [GOOD[0], CUT, GOOD[1]]
    body = b'{"data": {"list": [' + b", ".join(bytes(r) for r in records) + b"]}}"
    page = splitter.split(body)
    assert page is not None and [bytes(r) for r in page] == [bytes(r) for r in records]
    assert not page.utf8_checked and page.heads is None, "the filter checks each record, and names the one cut"
    assert splitter.running


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"data": {"other": []}}', b'{"data": {"list": 5}}', b"[]", b'{"data": {"list": [1,'],
    ids=repr,
)
def test_a_body_the_helper_cannot_split_is_left_to_the_hooks_decode(splitter, body):
    assert splitter.split(body) is None
    assert splitter.running, "a body it cannot split is an answer, not a failure"
    assert [bytes(r) for r in splitter.split(b'{"data": {"list": [1, 2]}}') or ()] == [b"1", b"2"]


def test_a_page_longer_than_asked_for_is_decoded_by_the_hook_which_names_it(splitter):
    body = envelope_body([{"id": str(i)} for i in range(5)])
    assert splitter.split(body, 4) is None
    assert splitter.running, "the helper stops reading at the record after the most, and says it has no page"
    with pytest.raises(PageTooLongError):
        decode_page(body, "data.list", (), limit=4, split=splitter.split)
    split = splitter.split(body, 5)
    assert split is not None and len(split) == 5
    assert len(decode_page(body, "data.list", (), limit=5, split=splitter.split)) == 5


@pytest.mark.parametrize(
    "starts, ends",
    [([5], [2]), ([0, 2], [4, 6]), ([0], [10**9]), ([-1], [3]), ([0, 5], [4]), ([0, 1, 2], [1, 2, 3])],
    ids=["ends before it starts", "overlaps", "past the end", "before the start", "an end missing", "too many"],
)
def test_a_helper_whose_spans_do_not_fit_the_body_is_stopped(splitter, monkeypatch, starts, ends):
    monkeypatch.setattr(page_check, "_read_split", lambda payload: (starts, ends, None))
    assert splitter.split(envelope_body([{"id": "1"}, {"id": "2"}]), 2) is None
    assert not splitter.running


def test_a_checker_without_a_records_path_splits_nothing(checker):
    assert checker.split(envelope_body([{"id": "1"}])) is None
    assert checker.running
