"""The config rules of the feed paginators (cursor, next_link, link_header): their default queries and what
validation refuses, naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from crawler_ops.config import CrawlTaskConfig


def task(source: dict[str, Any], **kafka: Any) -> CrawlTaskConfig:
    return CrawlTaskConfig.model_validate({"id": "jobs", "kafka": {"topic": "jobs", **kafka}, "source": source})


@pytest.mark.parametrize(
    ("paginator", "query"),
    [
        ({"type": "cursor"}, {"cursor": "{cursor}", "limit": "{limit}"}),
        ({"type": "cursor", "cursor_param": "after"}, {"after": "{cursor}", "limit": "{limit}"}),
        ({"type": "next_link"}, {"limit": "{limit}"}),
        ({"type": "link_header"}, {"limit": "{limit}"}),
    ],
)
def test_a_feeds_default_query_sends_the_page_size_and_the_cursor(paginator, query):
    cfg = task({"paginator": paginator})
    assert cfg.source.page_query == query and cfg.source.paginator.crawl == "feed"


@pytest.mark.parametrize(
    ("source", "kafka", "message"),
    [
        (
            {"paginator": {"type": "next_link"}, "request": {"query": {"c": "{cursor}", "n": "{limit}"}}},
            {},
            r"request.query.c: \{cursor\} needs paginator type cursor \(the paginator is next_link\)",
        ),
        (
            {"paginator": {"type": "offset"}, "request": {"query": {"c": "{cursor}", "o": "{offset}", "n": "{limit}"}}},
            {},
            r"request.query.c: \{cursor\} needs paginator type cursor",
        ),
        (
            {"paginator": {"type": "cursor"}, "request": {"query": {"c": "{cursor}", "p": "{page}", "n": "{limit}"}}},
            {},
            r"request.query.p: \{page\} cannot be sent by a cursor paginator",
        ),
        (
            {"paginator": {"type": "cursor"}, "request": {"query": {"n": "{limit}"}}},
            {},
            r"no template sends \{cursor\}",
        ),
        ({"paginator": {"type": "link_header"}, "request": {"query": {}}}, {}, r"no template sends \{limit\}"),
        (
            {"paginator": {"type": "link_header"}},
            {"key_field": None},
            r"kafka.key_field is null, or key_fields or key_template is set\), but a link_header",
        ),
        (
            {"paginator": {"type": "cursor"}},
            {"key_fields": ["site", "id"]},
            r"the key is not one field .* but a cursor paginator finds where the last crawl stopped",
        ),
        (
            {"paginator": {"type": "cursor"}, "window_filter": {"query": {"f": "{window_start}", "t": "{window_end}"}}},
            {},
            "window_filter: a cursor feed has no offsets to read a filtered view by",
        ),
        (
            {
                "paginator": {"type": "next_link"},
                "responses": [{"when": {"path": "code", "equals": 1}, "action": "skip"}],
            },
            {},
            r"source.responses\[0\]: action skip passes over a page, but a next_link feed",
        ),
    ],
)
def test_validation_refuses_what_a_feed_cannot_do_naming_the_field(source, kafka, message):
    with pytest.raises(ValidationError, match=message):
        task(source, **kafka)
