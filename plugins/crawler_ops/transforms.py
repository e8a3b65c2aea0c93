"""Built-in transforms: ``callable(record) -> value`` named by dotted path in a task's ``transform``.

A transform maps one raw source record to the value published to Kafka. It runs after filtering; if it
raises, that record is dead-lettered with the reason and the rest of the page is published. A transform with a
keyword-only parameter ``task_id`` is given the crawl task's id (see :func:`bind_task_id`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

JOB_FIELDS = ("id", "title", "company", "city", "salary", "education", "aae397", "Collect_time")
# What the old crawler service's ``JobData.from_raw`` kept of a raw record, under the source's own field names;
# the old service then set ``task_id`` on each job before publishing it.
OLD_JOB_FIELDS = ("id", "title", "company", "city", "salary", "education", "description", "aae397", "Collect_time")


def job_posting(record: dict[str, Any]) -> dict[str, Any]:
    """A job posting without its long description, the source's field names kept as they are."""
    missing = [name for name in ("id", "title") if not record.get(name)]
    if missing:
        raise ValueError(f"job posting lacks {', '.join(missing)}")
    return {name: record.get(name) for name in JOB_FIELDS}


def old_job_data(record: dict[str, Any], *, task_id: str) -> dict[str, Any]:
    """The value the old crawler service published: its ``JobData`` fields with the source's values (None when
    the record lacks one) and the crawl task's id as ``task_id``, so consumers of the old topic keep working."""
    value = {name: record.get(name) for name in OLD_JOB_FIELDS}
    value["task_id"] = task_id
    return value


def bind_task_id(transform: Callable[..., Any], task_id: str) -> Callable[[dict[str, Any]], Any]:
    """``transform`` with its keyword-only ``task_id`` parameter filled in, or as it is when it has none."""
    try:
        parameter = inspect.signature(transform).parameters.get("task_id")
    except (TypeError, ValueError):  # a callable whose signature cannot be read takes the record only
        return transform
    if parameter is None or parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
        return transform
    return functools.partial(transform, task_id=task_id)
