"""Pages checked in a helper process: its answers (UTF-8, the fields of each record), its limits, and the filter
trusting only them."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.crawl import page_check
from crawler_ops.crawl.page_check import PageChecker, write_array
from crawler_ops.filtering import DateRule, Window
from crawler_ops.records import HeadReader, Page, build_messages

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
