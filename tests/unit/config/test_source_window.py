"""source.window_filter in a config: off by default, and a filter that would not restrict the pages or the count to
the window rejected, naming the task and the field (as `crawler-ops validate` and DAG parsing do)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from crawler_ops.config import SourceConfig, parse_config

BOUNDS = {"from": "{window_start:%Y-%m-%d %H:%M:%S}", "to": "{window_end:%Y-%m-%d %H:%M:%S}"}


def errors_of(source: dict[str, Any]) -> str:
    loaded = parse_config({"tasks": [{"id": "jobs", "kafka": {"topic": "t"}, "source": source}]}, "tasks.yaml")
    assert not loaded.tasks
    return loaded.errors["jobs"]


def test_there_is_no_window_filter_by_default() -> None:
    assert SourceConfig().window_filter is None


def test_a_filter_with_both_bounds_is_accepted_for_pages_and_the_count() -> None:
    source = SourceConfig(window_filter={"query": BOUNDS})

    assert source.window_filter is not None
    assert source.window_filter.count_templates() == BOUNDS


def test_a_post_search_may_send_the_bounds_in_its_body_and_count_with_its_own_query() -> None:
    source = SourceConfig(
        request={"method": "POST", "body": {"offset": "{offset}", "limit": "{limit}"}},
        window_filter={"body": {"range": {"gte": "{window_start}", "lt": "{window_end}"}}, "count_query": BOUNDS},
    )

    assert source.window_filter is not None


def test_without_a_count_endpoint_only_the_pages_need_the_bounds() -> None:
    assert SourceConfig(count_path=None, window_filter={"query": BOUNDS}).window_filter is not None


@pytest.mark.parametrize(
    ("window_filter", "message"),
    [
        ({"query": {"from": "{window_start}"}}, r"window_filter: no query or body template sends \{window_end\}"),
        ({"query": {"to": "{window_end}"}}, r"window_filter: no query or body template sends \{window_start\}"),
        ({}, r"window_filter: no query or body template sends \{window_start\}"),
        (
            {"query": BOUNDS, "count_query": {"from": "{window_start}"}},
            r"window_filter: the count request sends no \{window_end\}",
        ),
        ({"query": {**BOUNDS, "o": "{offset}"}}, r"window_filter\.query\.o: \{offset\} differs between pages"),
        ({"query": {**BOUNDS, "x": "{until}"}}, r"window_filter\.query\.x: '\{until\}' uses the unknown placeholder"),
        ({"query": BOUNDS, "body": {"a": "{ref}"}}, r"window_filter\.body: page requests are GET"),
        ({"query": BOUNDS, "filter": 1}, r"filter"),
    ],
)
def test_a_filter_that_does_not_restrict_to_the_window_is_named_with_its_task(
    window_filter: dict[str, Any], message: str
) -> None:
    errors = errors_of({"window_filter": window_filter})

    assert re.search(message, errors), errors
    assert "jobs" in errors or "source" in errors
