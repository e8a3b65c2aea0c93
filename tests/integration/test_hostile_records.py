"""Records a source sends that the pipeline cannot carry as they are: each is dead-lettered on its own, the rest of
its page is published, and the run succeeds."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support import make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
# Nested just less deep than a page can be decoded at all: the page parses, the record is too deep to handle again.
DEPTH = 950
HOSTILE = {
    150: b'{"id": "deep", "deep": ' + b"[" * DEPTH + b"]" * DEPTH + b"}",
    160: b'{"id": "nul", "title": "a\\u0000b"}',
}


def hostile_pages(
    replaced: set[str], hostile: dict[int, bytes] = HOSTILE
) -> Callable[[str, dict[str, str], bytes], bytes]:
    """Rewrites the demo source's pages: the records at the offsets of ``hostile`` replaced (their ids go into
    ``replaced``)."""

    def rewrite(path: str, params: dict[str, str], body: bytes) -> bytes:
        if not path.endswith("/list"):
            return body
        offset = int(params["offset"])
        page = json.loads(body)
        records = [json.dumps(r, ensure_ascii=False).encode() for r in page["data"]["data"]]
        for at, record in hostile.items():
            if offset <= at < offset + len(records):
                replaced.add(page["data"]["data"][at - offset]["id"])
                records[at - offset] = record
        envelope: dict[str, Any] = {**page, "data": {**page["data"], "data": []}}
        head, _, tail = json.dumps(envelope).encode().partition(b'"data": []')
        return head + b'"data": [' + b", ".join(records) + b"]" + tail

    return rewrite


def test_records_too_deep_or_with_nul_are_dead_lettered_and_the_rest_of_their_page_published(
    source, source_proxy, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    replaced: set[str] = set()
    source_proxy.rewrite = hostile_pages(replaced)
    cfg = make_task(unique_id, max_attempts=1, source={"conn_id": source_proxy.conn_id})

    assert run_dag(cfg, REF) == "success"

    truth = source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)
    assert len(replaced) == len(HOSTILE)
    keys = sorted(m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic))
    assert keys == sorted(set(truth["in_window_ids"]) - replaced), "every other record of the two pages is published"
    dead = query(
        pg_uri,
        "SELECT source_offset, reason, record FROM crawler_ops.crawl_error WHERE kind = 'record' AND task_id = %s "
        "ORDER BY source_offset",
        unique_id,
    )
    assert [row[0] for row in dead] == [150, 160]
    (_, _, deep), (_, _, nul) = dead
    assert deep["unreadable"].startswith("nested") and deep["text"].startswith('{"id": "deep"')
    assert nul == {"id": "nul", "title": "a\ufffdb"}
    assert run_record(pg_uri, unique_id)["dead_lettered"] == 2
    assert watermark(pg_uri, unique_id) == 300


# Kept by their dates (inside the window), so without a check they would be published as sent.
NOT_UTF8 = {
    170: '{"id": "bad-title", "aae397": "2026-10-31 08:00:00", "title": "高级'.encode() + b"\xe5\xb7" + b'"}',
    180: b'{"id": "bad-date", "aae397": "2026-10-31 08:00:00\xff"}',
    190: b'{"id": "bad-name", "aae397": "2026-10-31 08:00:00", "meta": {"\xc0\xaf": 1}}',
}


def test_records_with_invalid_utf8_are_dead_lettered_naming_the_field_and_every_published_value_is_utf8(
    source, source_proxy, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    replaced: set[str] = set()
    source_proxy.rewrite = hostile_pages(replaced, NOT_UTF8)
    cfg = make_task(unique_id, max_attempts=1, source={"conn_id": source_proxy.conn_id})

    assert run_dag(cfg, REF) == "success"

    truth = source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)  # json.loads of each value: a UTF-8 error raises
    assert sorted(m.key for m in messages) == sorted(set(truth["in_window_ids"]) - replaced)
    dead = query(
        pg_uri,
        "SELECT source_offset, reason, record FROM crawler_ops.crawl_error WHERE kind = 'record' AND task_id = %s "
        "ORDER BY source_offset",
        unique_id,
    )
    assert [(offset, reason.split(" (byte")[0]) for offset, reason, _ in dead] == [
        (170, "invalid UTF-8 in field 'title'"),
        (180, "invalid UTF-8 in field 'aae397'"),
        (190, "invalid UTF-8 in field 'meta' (a field name)"),
    ]
    assert dead[0][2] == {"id": "bad-title", "aae397": "2026-10-31 08:00:00", "title": "高级\ufffd"}
    assert run_record(pg_uri, unique_id)["dead_lettered"] == 3
    assert watermark(pg_uri, unique_id) == 300
