"""The UTF-8 check of whole pages in a helper process: its answers, its limits, and the filter trusting only them."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.crawl import utf8_check
from crawler_ops.crawl.utf8_check import Utf8Checker, write_all
from crawler_ops.filtering import DateRule, Window
from crawler_ops.records import Page, build_messages

REF = datetime(2026, 11, 1, tzinfo=UTC)
GOOD = [msgspec.Raw(f'{{"id": "{i}", "title": "高级工程师 {i}"}}'.encode()) for i in range(50)]
# Its title ends with the first two bytes of a three-byte character: invalid in itself, whatever follows it.
CUT = msgspec.Raw('{"id": "cut", "title": "高级'.encode() + b"\xe5\xb7" + b'"}')


@pytest.fixture
def checker():
    with Utf8Checker("t1") as helper:
        assert helper.running
        yield helper


def test_a_page_whose_records_are_all_utf8_is_marked_checked(checker):
    page = Page(GOOD)
    checker.mark(page)
    assert page.utf8_checked


@pytest.mark.parametrize("where", [0, 25, 50])
def test_one_record_with_a_cut_character_anywhere_leaves_the_page_unchecked(checker, where):
    page = Page([*GOOD[:where], CUT, *GOOD[where:]])
    checker.mark(page)
    assert not page.utf8_checked
    assert checker.running, "an invalid page is an answer, not a failure of the helper"
    checker.mark(good := Page(GOOD))
    assert good.utf8_checked, "a shorter page after a longer one is checked on its own bytes only"


def test_pages_of_more_records_than_one_write_takes_are_checked_whole(checker, monkeypatch):
    monkeypatch.setattr(utf8_check, "IOV_MAX", 7)
    assert checker.all_utf8(GOOD)
    assert not checker.all_utf8([*GOOD, CUT])
    assert not checker.all_utf8([CUT, *GOOD])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_the_helpers_answer_is_whether_every_record_alone_is_utf8(texts):
    # Each record is a whole JSON value, so it starts and ends with an ASCII character, as here.
    records = [msgspec.Raw(b'"' + text + b'"') for text in texts]
    expected = all(is_utf8(bytes(r)) for r in records)
    with Utf8Checker("t1") as helper:
        assert helper.all_utf8(records) is expected


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
    page = Page(GOOD)
    checker.mark(page)
    assert not page.utf8_checked and not checker.running
    assert "records are checked in the chunk's process" in caplog.text
    checker.mark(again := Page(GOOD))
    assert not again.utf8_checked


def test_a_helper_that_does_not_answer_in_time_is_stopped(checker, monkeypatch):
    assert checker._proc is not None
    os.kill(checker._proc.pid, signal.SIGSTOP)
    monkeypatch.setattr(utf8_check, "ANSWER_BASE_S", 0.2)
    assert not checker.all_utf8(GOOD)
    assert not checker.running


def test_a_helper_that_cannot_start_checks_nothing(monkeypatch, caplog):
    monkeypatch.setattr(utf8_check.sys, "executable", "/nonexistent/python")
    with Utf8Checker("t1") as helper:
        assert not helper.running
        assert not helper.all_utf8(GOOD)
    assert "could not start it" in caplog.text


def test_without_memory_files_there_is_no_helper_and_the_log_says_why_once(monkeypatch, caplog):
    monkeypatch.delattr(utf8_check.os, "memfd_create")
    with Utf8Checker("t1") as helper:
        assert not helper.all_utf8(GOOD)
        helper.mark(page := Page(GOOD))
        assert not page.utf8_checked
    assert caplog.text.count("no memory files") == 1


def test_the_records_are_written_one_after_the_other_from_the_start():
    fd = os.memfd_create("test")
    try:
        assert write_all(fd, [msgspec.Raw(b'"ab"'), msgspec.Raw(b"1"), msgspec.Raw(b"{}")]) == 7
        assert os.pread(fd, 7, 0) == b'"ab"1{}'
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
