"""Crawls through the real stack in each paging mode of a source (page numbers with a size parameter or a fixed page
size, a POST search, no count endpoint), asserting on Kafka and PostgreSQL against the demo source's ground truth."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from tests.support import (
    DemoSource,
    duplicated_offsets,
    duplicates,
    make_task,
    read_topic,
    run_record,
    spawn_chunk,
    watermark,
)

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
LATER = datetime(2026, 11, 1, 6, tzinfo=UTC)
TOLERANCE_S = 24 * 3600
PAGES = {"type": "page"}
SEARCH = {"method": "POST", "path": "/api/{task}/search", "body": {"offset": "{offset}", "limit": "{limit}"}}
SEARCH_PAGES = {**SEARCH, "body": {"page": "{page}", "page_size": "{page_size}"}}

# mode id -> (the demo source's paging options, the task's source section, what each page request must be)
MODES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "page-with-size-param": (
        {},
        {"paginator": PAGES, "page_path": "/api/{task}/pages"},
        {"route": "pages", "method": "GET"},
    ),
    "page-with-fixed-size": (
        {"page_size": 100, "first_page": 0},
        {"paginator": {"type": "page", "first_page": 0, "size_param": None}, "page_path": "/api/{task}/pages"},
        {"route": "pages", "method": "GET", "page_size": 100},
    ),
    "post-search": ({}, {"request": SEARCH}, {"route": "search", "method": "POST"}),
    "post-search-by-page": (
        {"first_page": 0},
        {"paginator": {**PAGES, "first_page": 0}, "request": SEARCH_PAGES},
        {"route": "search", "method": "POST"},
    ),
    "offset-without-count": ({"count": False}, {"count_path": None}, {}),
    "page-without-count": (
        {"count": False},
        {"paginator": PAGES, "page_path": "/api/{task}/pages", "count_path": None},
        {"route": "pages", "method": "GET"},
    ),
}


def requests_of(source: DemoSource, task: str) -> list[dict[str, Any]]:
    return list(source._json("GET", f"/admin/tasks/{task}/requests")["requests"])


def assert_in_mode(source: DemoSource, task: str, expected: dict[str, Any]) -> None:
    """Every page request went the mode's way (none to /list unless that is the mode), none to a missing count."""
    logged = requests_of(source, task)
    assert logged, "the crawl read pages"
    assert all(r["status"] == 200 for r in logged), [r for r in logged if r["status"] != 200][:3]
    assert all(expected.items() <= r.items() for r in logged), [r for r in logged if not expected.items() <= r.items()]
    if "method" not in expected:
        assert all("route" not in r for r in logged), "offsets through /list"


def assert_published_once(
    source: DemoSource, kafka_bootstrap: str, task: str, topic: str, ref: datetime, before: set[str] = frozenset()
) -> set[str]:
    """Each record of the run's window published once: the new ones (not in ``before``) are exactly the window's."""
    truth = set(source.truth(task, ref, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"])
    messages = read_topic(kafka_bootstrap, topic)
    assert not duplicates(messages)
    keys = {m.key for m in messages}
    assert keys - before == truth - before, f"{len((keys - before) ^ (truth - before))} records differ"
    return keys


@pytest.mark.parametrize("mode", list(MODES))
def test_first_and_incremental_crawls_publish_every_in_window_record_once(
    mode, source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    paging, source_section, expected = MODES[mode]
    source.create(unique_id, total=2_050, ref=REF, in_window_share=0.5, append_step_s=60, paging=paging)
    cfg = make_task(unique_id, source=source_section)

    assert run_dag(cfg, REF) == "success"

    first = assert_published_once(source, kafka_bootstrap, unique_id, cfg.kafka.topic, REF)
    assert watermark(pg_uri, unique_id) == 2_050
    assert_in_mode(source, unique_id, expected)
    counted = source._json("GET", f"/admin/tasks/{unique_id}")["requests"]
    assert ("count" in counted) is (paging.get("count", True)), "the count endpoint is asked only when it exists"

    source.append(unique_id, 250)
    source.clear_requests(unique_id)
    assert run_dag(cfg, LATER) == "success"

    later = assert_published_once(source, kafka_bootstrap, unique_id, cfg.kafka.topic, LATER, first)
    assert len(later - first) == 250, "the appended records"
    assert watermark(pg_uri, unique_id) == 2_300
    assert_in_mode(source, unique_id, expected)
    # Without a count, the probe starts at the page of the last total found: it reads no old page either.
    assert all(r["offset"] + r["limit"] > 2_000 for r in requests_of(source, unique_id)), "no old page read"


def test_a_sigkill_mid_run_in_page_mode_loses_nothing_and_duplicates_at_most_one_page(
    source, kafka_bootstrap, pg_uri, unique_id
):
    source.create(unique_id, total=1_550, ref=REF, in_window_share=1.0)
    cfg = make_task(
        unique_id, max_chunks=1, source={"paginator": PAGES, "page_path": "/api/{task}/pages", "concurrency": 2}
    )
    run = RunContext(cfg=cfg, run_id="page-kill", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)
    assert chunk.batches[0].lo == 1_500 and all(b.lo % 100 == 0 for b in chunk.batches), "page-aligned batches"

    worker = spawn_chunk(cfg, run.run_id, REF, chunk, kill={"point": "before_commit", "nth": 3})
    worker.communicate(timeout=300)
    assert worker.returncode == -signal.SIGKILL

    result = crawl_chunk(replace(run, try_number=2), chunk)  # Airflow's retry of the killed task instance
    summary = commit_run(run, [chunk], [result])

    assert summary.status == "success"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    truth = source.truth(unique_id, REF, days=7, tolerance_s=TOLERANCE_S)
    assert {m.key for m in messages} == set(truth["in_window_ids"]), "nothing lost"
    repeated = duplicated_offsets(messages)
    assert repeated == list(range(1_300, 1_400)), "only the page in flight (the third) is published again"
    assert watermark(pg_uri, unique_id) == 1_550


@pytest.mark.parametrize(
    ("served", "count", "message"),
    [
        (150, True, "fixed page size is larger than batch_size (100)"),
        (50, False, "serves fewer records per page than asked; set batch_size"),
    ],
    ids=["larger-pages", "smaller-pages-without-count"],
)
def test_a_fixed_page_size_other_than_batch_size_fails_the_run_naming_batch_size(
    served, count, message, source, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=1_050, ref=REF, in_window_share=1.0, paging={"page_size": served, "count": count})
    section = {"paginator": {"type": "page", "size_param": None}, "page_path": "/api/{task}/pages"}
    cfg = make_task(unique_id, source={**section, "count_path": None if not count else "/api/{task}/count"})

    assert run_dag(cfg, REF) == "failed"

    assert message in json.dumps(run_record(pg_uri, unique_id)["errors"])
    assert not watermark(pg_uri, unique_id), "nothing done"
