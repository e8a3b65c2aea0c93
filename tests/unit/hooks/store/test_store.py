"""Unit tests of crawler_ops.hooks.store.hook that need no database: dead-lettered records as JSONB."""

from __future__ import annotations

import json

import pytest

from crawler_ops.hooks.store.hook import record_jsonb


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
