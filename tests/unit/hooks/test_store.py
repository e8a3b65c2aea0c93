"""Unit tests of crawler_ops.hooks.store that need no database: the size cap on dead-lettered records."""

from __future__ import annotations

import json

import pytest

from crawler_ops.hooks.store import DEAD_LETTER_MAX_BYTES, cap_record, record_jsonb


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


@pytest.mark.parametrize(
    ("record", "stored"),
    [
        ({"id": "r", "text": "a\x00b"}, {"id": "r", "text": "a\ufffdb"}),
        ({"id": "r", "\x00": 1}, {"id": "r", "\ufffd": 1}),
        ({"id": "r", "text": "\\u0000"}, {"id": "r", "text": "\\u0000"}),
        ({"id": "r", "text": "\\\x00"}, {"id": "r", "text": "\\\ufffd"}),
    ],
    ids=["nul-in-a-value", "nul-in-a-key", "backslash-u0000-is-text", "backslash-then-nul"],
)
def test_nul_characters_jsonb_cannot_hold_are_stored_as_replacement_characters(record, stored):
    jsonb = record_jsonb(record)

    assert json.loads(jsonb.dumps(jsonb.obj)) == stored
