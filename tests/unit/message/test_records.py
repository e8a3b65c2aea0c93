"""Unit tests of crawler_ops.message.records: message keys, filtering a page into Kafka messages, dead letters, size
checks."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.message.filtering import DateRule, Window
from crawler_ops.message.pages import Page, head_fields
from crawler_ops.message.records import (
    DEAD_LETTER_MAX_BYTES,
    Message,
    build_messages,
    cap_record,
    dead_letter_messages,
    record_key,
    too_large,
)

REPO = Path(__file__).resolve().parents[2]
RULE = DateRule(("aae397", "Collect_time"), "Asia/Shanghai")
REF = datetime(2026, 11, 20, 12, tzinfo=UTC)
WINDOW = Window.since(REF, days=7, now=REF, tolerance=timedelta(hours=24))
HEADERS = [("crawl_task", b"jobs_beijing"), ("run_id", b"scheduled__2026-11-20T12:00:00+00:00")]

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=10,
)
json_record = st.dictionaries(st.text(max_size=8), json_value, max_size=6)


def _reordered(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse insertion order."""
    if isinstance(value, dict):
        return {k: _reordered(v) for k, v in reversed(list(value.items()))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def _posting(offset: int, date: object, **extra: Any) -> dict[str, Any]:
    return {"id": f"job-{offset}", "aae397": date, "title": "高级数据工程师", "company": "北京某科技有限公司", **extra}


# --- record_key ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("job-42", b"job-42"), (42, b"42"), (0, b"0"), ("招聘-7", "招聘-7".encode())],
    ids=["string", "int", "zero", "chinese"],
)
def test_record_key_is_the_key_field_when_present(value: object, expected: bytes) -> None:
    assert record_key({"id": value, "title": "x"}, "id") == expected


@pytest.mark.parametrize(
    ("record", "key_field"),
    [
        ({"title": "x"}, "id"),
        ({"id": None, "title": "x"}, "id"),
        ({"id": "", "title": "x"}, "id"),
        ({"id": "j1"}, None),
    ],
    ids=["field-missing", "field-null", "field-empty", "no-key-field-configured"],
)
def test_record_key_falls_back_to_a_sha256_of_the_content(record: dict[str, Any], key_field: str | None) -> None:
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert record_key(record, key_field) == hashlib.sha256(canonical).hexdigest().encode()


@settings(max_examples=100, deadline=None)
@given(json_record)
def test_content_hash_key_is_stable_under_key_order(record: dict[str, Any]) -> None:
    key = record_key(record, None)
    assert len(key) == 64
    assert re.fullmatch(rb"[0-9a-f]{64}", key)
    assert record_key(_reordered(record), None) == key
    assert record_key(json.loads(json.dumps(record)), None) == key


@settings(max_examples=100, deadline=None)
@given(json_record, json_record)
def test_different_contents_get_different_hash_keys(first: dict[str, Any], second: dict[str, Any]) -> None:
    if first != second:
        assert record_key(first, None) != record_key(second, None)


# --- build_messages -------------------------------------------------------------------------------------------------


def test_a_page_is_split_into_kept_expired_and_dead_lettered_records() -> None:
    records = [
        _posting(1000, "2026-11-20 10:00:00"),
        _posting(1001, "2026-10-01 10:00:00"),
        _posting(1002, "not-a-date"),
        _posting(1003, None, Collect_time="2026-11-19T09:00:00+08:00"),
        _posting(1004, "2026-12-25 00:00:00"),
    ]
    result = build_messages(records, 1000, RULE, WINDOW, "id", HEADERS)

    assert [m.key for m in result.messages] == [b"job-1000", b"job-1003"]
    assert result.kept == 2
    assert result.expired == 1
    [(offset, reason, record), (future_offset, future_reason, _)] = result.dead_letters
    assert offset == 1002
    assert record is records[2]
    assert "aae397='not-a-date' unparseable" in reason
    assert "Collect_time missing" in reason
    assert future_offset == 1004
    assert future_reason.startswith("aae397='2026-12-25 00:00:00' is after 2026-11-21T12:00:00+00:00")


def test_every_message_carries_the_run_headers_and_its_source_offset() -> None:
    records = [_posting(i, "2026-11-20 10:00:00") for i in range(3)]
    result = build_messages(records, 4_200, RULE, WINDOW, "id", HEADERS)

    assert [list(m.headers) for m in result.messages] == [
        [*HEADERS, ("source_offset", str(offset).encode())] for offset in (4_200, 4_201, 4_202)
    ]


def test_source_offsets_count_records_that_were_filtered_out() -> None:
    records = [_posting(0, "2026-01-01 00:00:00"), _posting(1, "garbage"), _posting(2, "2026-11-20 10:00:00")]
    result = build_messages(records, 700, RULE, WINDOW, "id", HEADERS)
    [message] = result.messages
    assert dict(message.headers)["source_offset"] == b"702"
    assert [offset for offset, _, _ in result.dead_letters] == [701]


def test_values_are_utf8_json_with_chinese_text_intact() -> None:
    record = _posting(1, "2026-11-20 10:00:00")
    [message] = build_messages([record], 0, RULE, WINDOW, "id", HEADERS).messages

    assert "高级数据工程师".encode() in message.value
    assert b"\\u" not in message.value
    assert json.loads(message.value.decode("utf-8")) == record


def test_the_transform_maps_kept_records_only_and_its_value_is_published() -> None:
    seen: list[str] = []

    def transform(record: dict[str, Any]) -> dict[str, Any]:
        seen.append(record["id"])
        return {"job_id": record["id"], "title": record["title"]}

    records = [_posting(1, "2026-11-20 10:00:00"), _posting(2, "2020-01-01 00:00:00"), _posting(3, "bad")]
    result = build_messages(records, 0, RULE, WINDOW, "id", HEADERS, transform=transform)

    assert seen == ["job-1"]
    [message] = result.messages
    assert msgspec.json.decode(message.value) == {"job_id": "job-1", "title": "高级数据工程师"}
    assert message.key == b"job-1", "the key comes from the raw record, not the transformed value"


def test_a_record_whose_transform_raises_is_dead_lettered_and_the_page_goes_on() -> None:
    def transform(record: dict[str, Any]) -> dict[str, Any]:
        if record["id"] == "job-11":
            raise KeyError("salary")
        return record

    records = [_posting(10, "2026-11-20 10:00:00"), _posting(11, "2026-11-20 10:00:00"), _posting(12, "2026-11-20")]
    result = build_messages(records, 10, RULE, WINDOW, "id", HEADERS, transform=transform)

    assert [m.key for m in result.messages] == [b"job-10", b"job-12"]
    [(offset, reason, record)] = result.dead_letters
    assert (offset, record) == (11, records[1])
    assert reason.startswith("transform or encoding failed: KeyError")
    assert "salary" in reason


def test_records_without_a_key_field_get_content_hash_keys() -> None:
    record = {"aae397": "2026-11-20 10:00:00", "title": "司机"}
    [message] = build_messages([record], 0, RULE, WINDOW, "id", HEADERS).messages
    assert message.key == record_key(record, None)
    assert len(message.key) == 64


def test_naive_dates_use_the_explicit_timezone_over_the_rule() -> None:
    # 2026-11-21 19:00 is inside the window in Shanghai (11:00 UTC) but not in UTC (19:00 UTC > 12:00 end).
    record = _posting(1, "2026-11-21 19:00:00")
    assert build_messages([record], 0, RULE, WINDOW, "id", HEADERS).kept == 1
    in_utc = build_messages([record], 0, RULE, WINDOW, "id", HEADERS, tz=ZoneInfo("UTC"))
    assert (in_utc.kept, in_utc.expired, len(in_utc.dead_letters)) == (0, 0, 1)


def test_an_empty_page_produces_nothing() -> None:
    result = build_messages([], 0, RULE, WINDOW, "id", HEADERS)
    assert (result.kept, result.expired, result.dead_letters) == (0, 0, [])


def test_a_transform_value_that_cannot_be_encoded_is_dead_lettered() -> None:
    class Opaque:
        pass

    def transform(record: dict[str, Any]) -> Any:
        return Opaque() if record["id"] == "job-2" else record

    records = [_posting(1, "2026-11-20 10:00:00"), _posting(2, "2026-11-20 10:00:00")]
    result = build_messages(records, 1, RULE, WINDOW, "id", HEADERS, transform=transform)
    assert [m.key for m in result.messages] == [b"job-1"]
    assert [offset for offset, _, _ in result.dead_letters] == [2]


def test_dead_letter_messages_carry_the_record_reason_and_offset():
    (message,) = dead_letter_messages(
        [(42, "aae397='x' unparseable", {"id": "r1", "aae397": "x"})], "t.dead", "task", "run-1", "id", [("h", b"v")]
    )

    assert message.topic == "t.dead" and message.key == b"r1"
    assert json.loads(message.value) == {
        "task": "task",
        "run_id": "run-1",
        "source_offset": 42,
        "reason": "aae397='x' unparseable",
        "record": {"id": "r1", "aae397": "x"},
    }
    assert ("source_offset", b"42") in message.headers and ("h", b"v") in message.headers


def test_a_dead_letter_without_a_mapping_record_is_keyed_by_task_and_offset():
    (message,) = dead_letter_messages([(7, "not an object", [1, 2])], "d", "task", "r", "id", [])

    assert message.key == b"task:7"


def test_record_handling_imports_without_airflow() -> None:
    _assert_imports_without_airflow("crawler_ops.message.records")


@pytest.mark.parametrize(
    "module", ["crawler_ops.planning", "crawler_ops.message.filtering", "crawler_ops.config", "crawler_ops.results"]
)
def test_pure_modules_import_without_airflow(module: str) -> None:
    _assert_imports_without_airflow(module)


def _assert_imports_without_airflow(module: str) -> None:
    code = (
        "import sys, importlib; importlib.import_module(sys.argv[1]); "
        "loaded = sorted(m for m in ('airflow', 'confluent_kafka') if m in sys.modules); "
        "print(','.join(loaded))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "plugins"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "", f"{module} pulled in {out.stdout.strip()}"


# --- records too deep or unstorable --------------------------------------------------------------------------------


def nested_record(depth: int, **fields: Any) -> bytes:
    """A record's JSON with a value nested ``depth`` lists deep."""
    head = json.dumps(fields)[:-1].encode()
    return head + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"


def in_a_thread(call: Any) -> Any:
    """``call()`` on a thread of its own: its stack starts empty, however deep the test runner's own is (deeper
    under pytest-xdist, for one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def on_a_deep_stack(frames: int, call: Any) -> Any:
    """``call()`` from ``frames`` Python frames down, as filtering runs inside Airflow's task runner."""

    def descend(left: int) -> Any:
        return descend(left - 1) if left else call()

    return in_a_thread(lambda: descend(frames))


def page_as_fetched(*records: bytes) -> Page:
    """A page decoded as the source hook decodes it in a fetch thread: raw records and their date and key fields."""
    from crawler_ops.config import SourceConfig
    from crawler_ops.hooks.source.hook import SourceApiHook

    body = b'{"data": {"data": [' + b", ".join(records) + b"]}}"
    return in_a_thread(lambda: SourceApiHook(SourceConfig(), "t", "t", head_fields(RULE.fields, "id")).read_page(body))


@pytest.mark.parametrize(
    ("deep", "transform", "why"),
    [
        (nested_record(950, id="deep"), None, "aae397 missing"),
        (
            nested_record(950, id="deep", aae397="2026-11-19 08:00:00"),
            lambda record: record,
            "nested too deeply to decode or encode",
        ),
    ],
    ids=["no-date", "kept-through-a-transform"],
)
def test_a_record_the_page_decoded_but_too_deep_to_handle_is_dead_lettered_and_the_page_goes_on(deep, transform, why):
    good = json.dumps(_posting(0, "2026-11-19 08:00:00")).encode()
    records = page_as_fetched(good, deep)

    result = on_a_deep_stack(150, lambda: build_messages(records, 500, RULE, WINDOW, "id", HEADERS, transform))

    assert [m.key for m in result.messages] == [b"job-0"]
    ((offset, reason, stored),) = result.dead_letters
    assert offset == 501 and why in reason
    assert stored["unreadable"] in ("nested too deeply to decode", "nested more than 200 levels deep")
    assert stored["text"] == bytes(deep).decode()[: len(stored["text"])] and stored["text"].startswith('{"id": "deep"')
    dead = on_a_deep_stack(150, lambda: dead_letter_messages(result.dead_letters, "dlq", "t", "r", "id", HEADERS))
    assert json.loads(dead[0].value)["record"] == stored, "the dead-letter topic gets it too"


def test_a_dead_letter_nested_within_the_limit_keeps_the_record_itself():
    record = nested_record(20, id="shallow")

    result = build_messages(page_as_fetched(record), 0, RULE, WINDOW, "id", HEADERS)

    assert result.dead_letters[0].record == json.loads(record)


def test_a_record_too_deep_to_read_its_date_fields_here_is_dead_lettered_saying_so():
    good = json.dumps(_posting(0, "2026-11-19 08:00:00")).encode()
    records = [msgspec.Raw(good), msgspec.Raw(nested_record(950, id="deep", aae397="2026-11-19 08:00:00"))]

    result = on_a_deep_stack(150, lambda: build_messages(records, 0, RULE, WINDOW, "id", HEADERS))

    assert [m.key for m in result.messages] == [b"job-0"]
    ((offset, reason, stored),) = result.dead_letters
    assert (offset, reason) == (1, "nested too deeply to read its date fields")
    assert stored["unreadable"].startswith("nested") and stored["text"].startswith('{"id": "deep"')


def test_messages_larger_than_kafka_accepts_become_dead_letters_naming_their_size() -> None:
    records = [{"id": "small"}, {"id": "big", "padding": "x" * 5_000}, {"id": "also-small"}]
    messages = [
        Message(str(r["id"]).encode(), repr(r).encode(), [("source_offset", str(700 + i).encode())])
        for i, r in enumerate(records)
    ]

    kept, dead = too_large(messages, records, 700, limit=2_000)

    assert [m.key for m in kept] == [b"small", b"also-small"]
    [(offset, reason, record)] = dead
    assert (offset, record) == (701, records[1])
    assert reason.startswith(f"message of {len(messages[1].value) + 3} bytes is larger than kafka.max_message_bytes")
    assert too_large(messages[:1], records, 700, limit=2_000) == (messages[:1], [])


def record_of_size(size: int) -> dict[str, str]:
    """A record whose JSON is exactly ``size`` bytes of UTF-8 (3-byte characters and ASCII padding)."""
    empty = len(json.dumps({"id": "r", "text": ""}, ensure_ascii=False).encode())
    wide, narrow = divmod(size - empty, 3)
    return {"id": "r", "text": "职" * wide + "x" * narrow}


@pytest.mark.parametrize("size", [100, DEAD_LETTER_MAX_BYTES], ids=["small", "exactly-the-cap"])
def test_a_record_within_the_cap_is_stored_whole(size):
    record = record_of_size(size)
    assert len(json.dumps(record, ensure_ascii=False).encode()) == size

    assert cap_record(record) == record


@pytest.mark.parametrize("size", [DEAD_LETTER_MAX_BYTES + 1, 10 * DEAD_LETTER_MAX_BYTES], ids=["one-over", "ten-times"])
def test_a_record_over_the_cap_is_stored_as_truncated_text_that_fits_the_cap(size):
    record = record_of_size(size)

    capped = cap_record(record)

    text = json.dumps(record, ensure_ascii=False)
    assert capped == {"truncated": True, "text": text[: len(capped["text"])]}, "the start of the record's JSON"
    assert len(capped["text"]) > 1000
    assert len(json.dumps(capped, ensure_ascii=False).encode()) <= DEAD_LETTER_MAX_BYTES


@pytest.mark.parametrize(
    "text",
    ["𠀀" * DEAD_LETTER_MAX_BYTES, '"\\' * DEAD_LETTER_MAX_BYTES],
    ids=["4-byte-characters", "quotes-and-backslashes"],
)
def test_a_capped_record_fits_the_cap_whatever_its_characters(text):
    record = {"id": "r", "text": text}

    capped = cap_record(record)

    assert capped["truncated"] is True and json.dumps(record, ensure_ascii=False).startswith(capped["text"])
    assert DEAD_LETTER_MAX_BYTES - 1024 < len(json.dumps(capped, ensure_ascii=False).encode()) <= DEAD_LETTER_MAX_BYTES


def test_values_json_cannot_encode_are_stored_as_text():
    from datetime import date

    assert cap_record({"id": "r", "day": date(2026, 11, 1)}) == {"id": "r", "day": date(2026, 11, 1)}
    capped = cap_record({"id": "r", "day": date(2026, 11, 1), "pad": "x" * DEAD_LETTER_MAX_BYTES})
    assert capped["text"].startswith('{"id": "r", "day": "2026-11-01"')


# --- invalid UTF-8 inside records (issue 27, item 8a) ---------------------------------------------------------------

GOOD = json.dumps(_posting(0, "2026-11-19 08:00:00"), ensure_ascii=False).encode()


def with_bytes(field: str, raw: bytes, offset: int = 1) -> bytes:
    """A kept posting whose ``field`` holds ``raw`` bytes (maybe not UTF-8) inside its JSON string."""
    head = json.dumps(_posting(offset, "2026-11-19 08:00:00"), ensure_ascii=False)[:-1].encode()
    return head + b', "' + field.encode() + b'": "ab' + raw + b'cd"}'


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (b"\xff", "title_raw"),
        (b"\xc3", "memo"),
        (b"\xed\xa0\x80", "surrogate"),
        (b"\xf4\x90\x80\x80", "beyond_u10ffff"),
        (b"\xe4\xb8", "truncated_chinese"),
        (b"\xc0\xaf", "overlong"),
    ],
    ids=["ff", "lone-lead-byte", "encoded-surrogate", "beyond-unicode", "cut-character", "overlong-slash"],
)
@pytest.mark.parametrize("transform", [None, lambda record: record], ids=["as-sent", "transformed"])
@pytest.mark.parametrize("key_field", ["id", None], ids=["key-field", "content-key"])
def test_a_record_with_invalid_utf8_is_dead_lettered_naming_the_field_and_never_published(
    bad, field, transform, key_field
):
    records = page_as_fetched(GOOD, with_bytes(field, bad), GOOD)

    result = build_messages(records, 300, RULE, WINDOW, key_field, HEADERS, transform)

    assert len(result.messages) == 2
    for message in result.messages:
        bytes(message.value).decode("utf-8")  # every published value is UTF-8
    ((offset, reason, stored),) = result.dead_letters
    at = with_bytes(field, bad).index(b"ab" + bad) + 2
    assert offset == 301
    assert reason == f"invalid UTF-8 in field '{field}' (byte {at} of the record); not published"
    assert stored[field] == "ab" + "\ufffd" * len(bad.decode("utf-8", "replace")) + "cd", "kept, with U+FFFD"
    assert stored["id"] == "job-1"


def test_invalid_utf8_in_a_field_name_or_a_nested_value_is_named_by_its_path():
    nested = b'{"id": "n", "aae397": "2026-11-19 08:00:00", "tags": [{"a": "ok"}, {"b\xff": "x"}]}'
    deeper = b'{"id": "m", "aae397": "2026-11-19 08:00:00", "meta": {"list": ["ok", "bad\xfe"]}}'

    result = build_messages(page_as_fetched(nested, deeper), 0, RULE, WINDOW, "id", HEADERS)

    reasons = [reason for _, reason, _ in result.dead_letters]
    assert reasons[0].startswith("invalid UTF-8 in field 'tags[1]' (a field name) (byte ")
    assert reasons[1].startswith("invalid UTF-8 in field 'meta.list[1]' (byte ")
    assert result.messages == []


@pytest.mark.parametrize("fetched", [True, False], ids=["page-as-fetched", "raw-records"])
def test_invalid_utf8_in_a_date_field_is_dead_lettered_and_the_page_goes_on(fetched):
    bad_date = b'{"id": "d", "aae397": "2026-11-19 08:00:00\xff"}'
    records = page_as_fetched(GOOD, bad_date) if fetched else [msgspec.Raw(GOOD), msgspec.Raw(bad_date)]

    result = build_messages(records, 0, RULE, WINDOW, "id", HEADERS)

    assert [m.key for m in result.messages] == [b"job-0"]
    ((offset, reason, stored),) = result.dead_letters
    assert offset == 1 and reason.startswith("invalid UTF-8 in field 'aae397' (byte ")
    assert stored == {"id": "d", "aae397": "2026-11-19 08:00:00\ufffd"}


def test_with_one_date_field_and_no_key_a_record_too_deep_and_one_not_utf8_are_told_apart():
    rule = DateRule(("aae397",), "Asia/Shanghai")
    deep = nested_record(950, id="deep", aae397="2026-11-19 08:00:00")
    records = [msgspec.Raw(deep), msgspec.Raw(b'{"aae397": "2026-11-19\xff"}')]

    result = on_a_deep_stack(150, lambda: build_messages(records, 0, rule, WINDOW, None, HEADERS))

    reasons = [reason for _, reason, _ in result.dead_letters]
    assert reasons[0] == "nested too deeply to read its date fields"
    assert reasons[1].startswith("invalid UTF-8 in field 'aae397'")


# --- the raw-record paths and the dead letters' exact form --------------------------------------------------------


def test_a_kept_raw_record_with_its_key_is_published_as_the_source_sent_it():
    from crawler_ops.message.records import kept_message

    raw = msgspec.Raw(b'{"id": "a",   "aae397": "2026-11-19"}')
    message = kept_message(raw, "a", "id", None, HEADERS, 7)

    assert isinstance(message, Message) and message.key == b"a" and message.value is raw
    assert message.headers == [*HEADERS, ("source_offset", b"7")]


@pytest.mark.parametrize(
    ("key_value", "key_field"), [("", "id"), (None, "id"), ("a", None)], ids=["empty-key", "no-key", "no-key-field"]
)
def test_a_kept_raw_record_without_a_key_value_is_decoded_and_keyed_by_its_content(key_value, key_field):
    from crawler_ops.message.records import kept_message

    raw = msgspec.Raw(b'{"id": "",   "aae397": "2026-11-19"}')
    message = kept_message(raw, key_value, key_field, None, HEADERS, 7)

    decoded = {"id": "", "aae397": "2026-11-19"}
    assert isinstance(message, Message) and message.value == msgspec.json.encode(decoded)
    assert message.key == hashlib.sha256(msgspec.json.encode(decoded, order="sorted")).hexdigest().encode()


def test_a_kept_record_whose_transform_recurses_too_deeply_is_dead_lettered_as_it_came():
    from crawler_ops.message.records import kept_message

    def too_deep(record: dict[str, Any]) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    record = {"id": "a", "aae397": "2026-11-19"}
    assert kept_message(record, "a", "id", too_deep, HEADERS, 9) == (9, "nested too deeply to decode or encode", record)


def test_a_raw_record_whose_fields_do_not_decode_is_dead_lettered_with_the_start_of_its_text():
    bad = b'{"id": "x", "aae397": "2026-11-19 08:00:00", }'
    result = build_messages([msgspec.Raw(GOOD), msgspec.Raw(bad)], 40, RULE, WINDOW, "id", HEADERS)

    assert [m.key for m in result.messages] == [b"job-0"]
    [(offset, reason, stored)] = result.dead_letters
    assert (offset, reason) == (41, "its date or key fields do not decode")
    assert stored == {"unreadable": stored["unreadable"], "text": bad.decode()}
    assert stored["unreadable"].startswith("does not decode: ")


def test_a_dead_letter_of_raw_text_that_is_not_utf8_keeps_it_with_replacement_characters():
    from crawler_ops.message.records import dead_letter_record

    stored = dead_letter_record(msgspec.Raw(b'{"a": "x\xffy", }'))
    assert stored["text"] == '{"a": "x\ufffdy", }' and stored["unreadable"].startswith("does not decode: ")


def nest(depth: int, container: str) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if container == "list" else {"k": value}
    return value


@pytest.mark.parametrize("container", ["list", "dict"])
def test_a_value_nests_deeper_than_the_limit_only_past_it(container):
    from crawler_ops.message.records import nests_deeper

    for limit in (0, 1, 3, 10):
        assert not nests_deeper(nest(limit, container), limit)
        assert nests_deeper(nest(limit + 1, container), limit)
    assert not nests_deeper({"a": [1, {"b": 2}], "c": "x"}, 3) and nests_deeper({"a": [1, {"b": [2]}]}, 3)


@pytest.mark.parametrize("container", ["list", "dict"])
def test_a_dead_letter_record_nested_past_the_limit_is_kept_as_text_and_at_the_limit_whole(container):
    from crawler_ops.message.records import DEAD_LETTER_MAX_DEPTH, dead_letter_record

    at_limit, past = nest(DEAD_LETTER_MAX_DEPTH, container), nest(DEAD_LETTER_MAX_DEPTH + 1, container)
    assert dead_letter_record(at_limit) == at_limit
    why = f"nested more than {DEAD_LETTER_MAX_DEPTH} levels deep"
    assert dead_letter_record(past) == {"unreadable": why, "text": None}, "a decoded record has no text to keep"
    raw = msgspec.json.encode(past)
    assert dead_letter_record(msgspec.Raw(raw)) == {"unreadable": why, "text": raw.decode()}


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b'{"a": "x\x80"}', "field 'a'"),
        (b'{"a": ["ok", {"b": "\xdf"}]}', "field 'a[1].b'"),
        (b'{"\xff": 1}', "field '(record)' (a field name)"),
        (b'{"a": {"\xff": 1}}', "field 'a' (a field name)"),
        (b'{"a": \xff', "the record"),
        (b'{"a": 1}', "the record"),
    ],
    ids=["lowest-invalid-byte", "nested", "top-level-name", "nested-name", "not-json", "nothing-invalid"],
)
def test_the_first_invalid_utf8_is_located_by_its_field_path(data, where):
    from crawler_ops.message.records import utf8_field

    assert utf8_field(data) == where


def test_the_dead_letter_topic_gets_the_reason_cut_to_1000_bytes_in_a_header():
    reason = "r" * 1500
    (message,) = dead_letter_messages([(3, reason, {"id": "a"})], "d", "task", "run", "id", [("h", b"v")])

    assert message.headers == [("h", b"v"), ("source_offset", b"3"), ("reason", b"r" * 1000)]
    assert json.loads(message.value)["reason"] == reason


def test_a_message_of_exactly_the_limit_is_published_and_one_byte_more_is_a_dead_letter():
    records = [{"id": "k"}, {"id": "kk"}]
    messages = [
        Message(b"k", b"v" * 9, [("source_offset", b"0")]),  # key and value: 10 bytes
        Message(b"kk", b"v" * 9, [("source_offset", b"1")]),  # 11 bytes, 7 bytes more value than key
    ]

    kept, dead = too_large(messages, records, 0, limit=10)

    assert kept == messages[:1] and [d.offset for d in dead] == [1]
    assert dead[0].reason == "message of 11 bytes is larger than kafka.max_message_bytes (10); not published"
    assert too_large(messages[:1], records, 0, limit=10) == (messages[:1], [])


def test_a_capped_record_fills_the_cap_exactly_when_its_text_fits_it():
    # The wrapper {"truncated": true, "text": ""} is 31 bytes; the text is the first DEAD_LETTER_MAX_BYTES - 64
    # bytes of the record's JSON, whose quotes and backslashes take one byte more each when stored: with 33 of
    # them the capped record is exactly DEAD_LETTER_MAX_BYTES long, and is kept as it is.
    record = {"a": '"' * 15 + "x" * DEAD_LETTER_MAX_BYTES}
    capped = cap_record(record)

    assert len(capped["text"]) == DEAD_LETTER_MAX_BYTES - 64
    assert len(json.dumps(capped, ensure_ascii=False).encode()) == DEAD_LETTER_MAX_BYTES


def test_a_capped_record_of_quotes_shrinks_its_text_in_proportion_until_it_fits():
    capped = cap_record({"a": '"' * DEAD_LETTER_MAX_BYTES})
    # Each quote is stored as \\\" (4 bytes): the text shrinks from DEAD_LETTER_MAX_BYTES - 64 in proportion.
    assert len(capped["text"]) == 32_729
    assert len(json.dumps(capped, ensure_ascii=False).encode()) <= DEAD_LETTER_MAX_BYTES


def test_record_head_reads_the_given_fields_of_a_raw_or_decoded_record():
    from crawler_ops.message.pages import record_head

    raw = msgspec.Raw(b'{"a": 1, "b": "x", "c": [3]}')
    assert record_head(raw, ("b", "c", "z")) == {"b": "x", "c": [3], "z": None}
    assert record_head({"a": 1, "b": "x"}, ("b", "z")) == {"b": "x", "z": None}
    with pytest.raises(ValueError, match=r"^not a JSON object: Expected `object`, got `array`$"):
        record_head(msgspec.Raw(b"[1, 2]"), ("a",))


@pytest.mark.parametrize("key_json", [b'"id": "", ', b'"id": null, ', b""], ids=["empty", "null", "absent"])
def test_a_raw_record_without_a_key_value_is_keyed_by_its_content_not_published_under_an_empty_key(key_json):
    raw = b"{" + key_json + b'"aae397": "2026-11-19 08:00:00",  "n": 1}'
    result = build_messages([msgspec.Raw(raw)], 5, RULE, WINDOW, "id", HEADERS)

    [message] = result.messages
    decoded = msgspec.json.decode(raw)
    assert message.key == hashlib.sha256(msgspec.json.encode(decoded, order="sorted")).hexdigest().encode()
    assert message.value == msgspec.json.encode(decoded)


def test_the_fields_read_are_the_date_fields_then_the_key_field_once():
    assert head_fields(("a", "b"), None) == ("a", "b")
    assert head_fields(("a", "b"), "b") == ("a", "b")
    assert head_fields(("a", "b"), "id") == ("a", "b", "id")


def test_a_kept_raw_record_with_its_key_is_published_byte_for_byte_as_sent():
    raw = b'{"n": 1,   "id": "a", "aae397": "2026-11-19 08:00:00"}'
    [message] = build_messages([msgspec.Raw(raw)], 0, RULE, WINDOW, "id", HEADERS).messages
    assert (message.key, bytes(message.value)) == (b"a", raw)


def test_with_one_date_field_and_no_key_field_a_kept_record_is_keyed_by_its_content():
    rule = DateRule(("aae397",), "Asia/Shanghai")
    record = {"aae397": "2026-11-19 08:00:00", "n": 1}
    [message] = build_messages([msgspec.Raw(msgspec.json.encode(record))], 0, rule, WINDOW, None, HEADERS).messages
    assert message.key == record_key(record, None)


@pytest.mark.parametrize(
    "page",
    [
        Page([msgspec.Raw(GOOD)]),
        Page([msgspec.Raw(GOOD)], ("aae397", "Collect_time", "id"), None),
        Page([msgspec.Raw(GOOD)], ("other",), [("2026-11-19 08:00:00",)]),
    ],
    ids=["no-heads", "these-fields-not-read", "heads-of-other-fields"],
)
def test_a_page_whose_decode_did_not_read_these_fields_is_read_again(page):
    reread = build_messages(page, 0, RULE, WINDOW, "id", HEADERS)
    assert [m.key for m in reread.messages] == [b"job-0"]
