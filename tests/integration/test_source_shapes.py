"""Sources whose answers have other shapes than a JSON envelope, crawled through the real stack: a bare JSON list as
the body, JSON Lines, a total in a response header, a feed that ends on ``has_more: false`` while still naming a next
position, a cursor sent back in a POST body. Each shape is crawled exactly, survives a SIGKILL mid-run (Airflow's
retry of the killed chunk), and is crawled incrementally after appends; assertions are on Kafka, PostgreSQL and the
demo source's request log."""

from __future__ import annotations

import signal
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from tests.support import DemoSource, duplicates, make_task, read_topic, spawn_chunk, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
LATER = datetime(2026, 11, 1, 6, tzinfo=UTC)
TOLERANCE_S = 24 * 3600
FEED_PATH = "/api/{task}/feed"
ONE_RECORD = "/api/{task}/list?offset=0&limit=1"

# shape -> (the demo source's task options, the task's source section)
SHAPES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "bare-list": ({"paging": {"body": "list"}}, {"records_path": "."}),
    "json-lines": ({"paging": {"body": "jsonl"}}, {"records_format": "jsonl"}),
    "total-header": (
        {"paging": {"total_header": True, "count": False}},
        {"count_path": ONE_RECORD, "total_header": "X-Total-Count"},
    ),
    "bare-list-total-header": (  # GitHub-style: a bare array, the total beside it in a header, no count endpoint
        {"paging": {"body": "list", "total_header": True, "count": False}},
        {"records_path": "", "count_path": ONE_RECORD, "total_header": "X-Total-Count"},
    ),
    "feed-has-more": (
        {"feed": {"next": "cursor", "end": "has_more"}},
        {"paginator": {"type": "cursor", "cursor_path": "data.next_cursor", "has_more_path": "data.has_more"}},
    ),
    "feed-bare-list-link-header": (
        {"feed": {"next": "link_header", "body": "list"}},
        {"paginator": {"type": "link_header"}, "records_path": ""},
    ),
    "feed-cursor-in-a-post-body": (
        {"feed": {"next": "cursor"}},
        {
            "paginator": {"type": "cursor", "cursor_path": "data.next_cursor"},
            "request": {"method": "POST", "body": {"cursor": "{cursor}", "limit": "{limit}"}},
        },
    ),
    "feed-json-lines-header-cursor": (
        {"feed": {"next": "header_cursor", "body": "jsonl"}},
        {"paginator": {"type": "header_cursor"}, "records_format": "jsonl"},
    ),
}


def shaped_task(task: str, shape: str) -> Any:
    section = SHAPES[shape][1]
    if "paginator" in section:
        section = {**section, "page_path": FEED_PATH, "count_path": None}
    return make_task(task, max_chunks=1, source={**section, "concurrency": 1})


def requests_of(source: DemoSource, task: str) -> list[dict[str, Any]]:
    return list(source._json("GET", f"/admin/tasks/{task}/requests")["requests"])


def in_window(source: DemoSource, task: str, ref: datetime) -> set[str]:
    return set(source.truth(task, ref, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"])


def crawl(cfg: Any, run_id: str, ref: datetime, kill_at: int | None = None) -> None:
    """One run's plan, chunk and commit, as the DAG's tasks run them; ``kill_at``: the chunk is SIGKILLed once after
    its ``kill_at``-th page reached Kafka unconfirmed, then retried as Airflow retries a killed task instance."""
    run = RunContext(cfg=cfg, run_id=run_id, ref=ref, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)
    if kill_at is not None:
        worker = spawn_chunk(cfg, run.run_id, ref, chunk, kill={"point": "before_commit", "nth": kill_at})
        worker.communicate(timeout=300)
        assert worker.returncode == -signal.SIGKILL
        run = replace(run, try_number=2)
    summary = commit_run(run, [chunk], [crawl_chunk(run, chunk)])
    assert summary.status == "success", summary


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_shape_is_crawled_exactly_survives_a_kill_and_crawls_incrementally(
    shape, source, kafka_bootstrap, pg_uri, unique_id
):
    options, _ = SHAPES[shape]
    feed = "feed" in options
    total = 1_050
    source.create(unique_id, total=total, ref=REF, in_window_share=1.0, append_step_s=60, **options)
    cfg = shaped_task(unique_id, shape)

    crawl(cfg, "shape-first", REF, kill_at=3)

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    first = {m.key for m in messages}
    assert first == in_window(source, unique_id, REF), "nothing lost, nothing more"
    again = sum(n - 1 for n in duplicates(messages).values())
    assert 0 < again <= 100, "at most the killed page published again"
    logged = requests_of(source, unique_id)
    assert all(r["status"] == 200 for r in logged), [r for r in logged if r["status"] != 200][:3]
    method = cfg.source.request.method
    assert all(r.get("method", "GET") == method for r in logged), f"every page asked by {method}"
    if method == "POST":  # the cursor travels in the body: none on the first page, then each page's next
        assert [r["body"].get("cursor") for r in logged[:3]] == [None, "o950", "o850"], logged[:3]
    if feed:
        pages = -(-total // 100)
        assert len(logged) == pages + 1, f"every page once, the killed one twice, no page past the end: {len(logged)}"
        assert watermark(pg_uri, unique_id) == pages
    else:
        assert watermark(pg_uri, unique_id) == total
        counted = source._json("GET", f"/admin/tasks/{unique_id}")["requests"]
        assert ("count" in counted) is (options["paging"].get("count", True)), "a missing count endpoint never asked"

    source.append(unique_id, 250)
    source.clear_requests(unique_id)
    crawl(cfg, "shape-later", LATER)

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    later = {m.key for m in messages} - first
    assert later == in_window(source, unique_id, LATER) - first and len(later) == 250, "exactly the appended records"
    assert sum(n - 1 for n in duplicates(messages).values()) == again, "the incremental run published nothing twice"
    if not feed:
        assert watermark(pg_uri, unique_id) == total + 250
        pages = [r for r in requests_of(source, unique_id) if r["limit"] != 1]  # a total read from a page of one
        assert pages and all(r["offset"] + r["limit"] > total - 100 for r in pages), "no old page read again"
