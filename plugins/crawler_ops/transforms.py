"""Example transforms: ``callable(record) -> value`` named by dotted path in a task's ``transform``.

A transform maps one raw source record to the value published to Kafka. It runs after filtering; if it
raises, that record is dead-lettered with the reason and the rest of the page is published.
"""

from __future__ import annotations

from typing import Any

JOB_FIELDS = ("id", "title", "company", "city", "salary", "education", "aae397", "Collect_time")


def job_posting(record: dict[str, Any]) -> dict[str, Any]:
    """A job posting without its long description, the source's field names kept as they are."""
    missing = [name for name in ("id", "title") if not record.get(name)]
    if missing:
        raise ValueError(f"job posting lacks {', '.join(missing)}")
    return {name: record.get(name) for name in JOB_FIELDS}
