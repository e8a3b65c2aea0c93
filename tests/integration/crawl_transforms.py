"""Transforms used by the integration tests (named by dotted path in a task's ``transform``)."""

from __future__ import annotations

from typing import Any

OVERSIZED_BYTES = 2_000_000


def oversized(record_id: str) -> bool:
    """About one record in 40 is blown up (decided by its id, so a test can tell which)."""
    return int(record_id, 16) % 40 == 0


def inflate_some(record: dict[str, Any]) -> dict[str, Any]:
    """The record as it is, or, for :func:`oversized` ones, with a 2 MB field: larger than Kafka accepts."""
    if oversized(record["id"]):
        return {**record, "padding": "x" * OVERSIZED_BYTES}
    return record
