"""source.paginator and source.request in a config: defaults as before, and each broken template named by its task
and field when the config is validated (as `crawler-ops validate` and DAG parsing do)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from crawler_ops.config import SourceConfig, parse_config


def errors_of(source: dict[str, Any]) -> str:
    loaded = parse_config({"tasks": [{"id": "jobs", "kafka": {"topic": "t"}, "source": source}]}, "tasks.yaml")
    assert not loaded.tasks
    return loaded.errors["jobs"]


def test_the_default_request_is_todays_get_with_offset_and_limit() -> None:
    source = SourceConfig(offset_param="start", limit_param="n")

    assert (source.request.method, source.request_path, source.page_query) == (
        "GET",
        "/api/{task}/list",
        {"start": "{offset}", "n": "{limit}"},
    )


def test_a_page_paginator_asks_page_and_page_size_or_the_page_alone_for_a_fixed_size() -> None:
    assert SourceConfig(paginator={"type": "page"}).page_query == {"page": "{page}", "page_size": "{page_size}"}
    fixed = SourceConfig(paginator={"type": "page", "page_param": "p", "size_param": None})
    assert fixed.page_query == {"p": "{page}"}


def test_a_body_replaces_the_default_query() -> None:
    body = {"offset": "{offset}", "limit": "{limit}"}

    assert SourceConfig(request={"method": "POST", "body": body}).page_query == {}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"request": {"query": {"o": "{offset}", "l": "{lim}"}}}, r"request\.query\.l: '\{lim\}' uses the unknown"),
        ({"request": {"body": {"o": "{offset}"}}}, r"request\.body: a GET request has no body"),
        (
            {"request": {"method": "POST", "body": {"o": "{offset}", "l": "{limit}", "p": ["{page}"]}}},
            r"request\.body\.p\[0\]: \{page\} needs paginator type page",
        ),
        ({"request": {"method": "POST", "body": {"o": "{offset}"}}}, r"request: no template sends \{limit\}"),
        ({"paginator": {"type": "page"}, "request": {"query": {"p": "{page}"}}}, r"no template sends \{page_size\}"),
        ({"request": {"headers": {"X": "{ref:%Q"}}}, r"request\.headers\.X: '\{ref:%Q' is no template"),
        ({"request": {"query": {"o": "{offset:%Y}", "l": "{limit}"}}}, r"format spec '%Y' does not apply"),
        ({"request": {"path": "/x/{task!r}"}}, r"request\.path: .* converts"),
        ({"paginator": {"type": "seek"}}, r"source\.paginator\.type"),
        ({"paginator": {"type": "page", "first_page": 2}}, r"source\.paginator\.first_page"),
    ],
    ids=[
        "unknown-placeholder",
        "body-on-get",
        "page-with-offset-paginator",
        "no-limit",
        "no-page-size",
        "broken-braces",
        "bad-format-spec",
        "conversion",
        "unknown-paginator",
        "first-page-2",
    ],
)
def test_a_broken_request_is_named_by_its_task_and_field(source: dict[str, Any], message: str) -> None:
    error = errors_of(source)

    assert error.startswith("tasks.yaml: task 'jobs': field 'source")
    assert re.search(message, error), error
