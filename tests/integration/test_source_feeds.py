"""Crawls of newest-first feeds through the real stack with each sequential paginator (a cursor token in the body, a
next link in the body, an RFC 8288 Link header), asserting on Kafka, PostgreSQL and the demo source's request log
against its ground truth: exact crawls, incremental runs that stop at the mark, a first crawl that stops at the
window, a SIGKILL mid-walk, a next link to another host, an expired cursor."""

from __future__ import annotations

import json
import signal
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from tests.support import (
    DemoSource,
    MissingTopic,
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
FEED_PATH = "/api/{task}/feed"

# paginator -> the task's source section
FEEDS: dict[str, dict[str, Any]] = {
    "cursor": {"paginator": {"type": "cursor", "cursor_path": "data.next_cursor"}},
    "header_cursor": {"paginator": {"type": "header_cursor"}},
    "next_link": {"paginator": {"type": "next_link", "next_path": "data.next"}},
    "link_header": {"paginator": {"type": "link_header"}},
}


def feed_task(task: str, kind: str, **overrides: Any) -> Any:
    return make_task(
        task, max_chunks=1, source={**FEEDS[kind], "page_path": FEED_PATH, "count_path": None}, **overrides
    )


def feed_requests(source: DemoSource, task: str) -> list[dict[str, Any]]:
    """The feed requests since the last clear, in order; each has the position it asked (None: the first page)."""
    logged = list(source._json("GET", f"/admin/tasks/{task}/requests")["requests"])
    assert all(r.get("route") == "feed" for r in logged), "every page through the feed"
    return logged


def positions(requests: list[dict[str, Any]]) -> list[str | None]:
    return [r["position"] for r in requests]


def truth(source: DemoSource, task: str, ref: datetime) -> set[str]:
    return set(source.truth(task, ref, days=7, tolerance_s=TOLERANCE_S)["in_window_ids"])


def pages_to_window(source: DemoSource, task: str, total: int, ref: datetime) -> int:
    """The pages a first crawl reads: up to the first page (of 100, newest first) whose records are all older than
    the window, by the source's true dates (the truth's ids in the window)."""
    window = truth(source, task, ref)
    ids = [r["id"] for lo in range(0, total, 500) for r in source.records(task, lo, min(500, total - lo))][::-1]
    pages = [ids[lo : lo + 100] for lo in range(0, total, 100)]
    return next((n + 1 for n, page in enumerate(pages) if not window.intersection(page)), len(pages))


def feed_state(pg_uri: str, task: str) -> tuple[Any, ...]:
    import psycopg

    with psycopg.connect(pg_uri) as conn:
        row = conn.execute(
            "SELECT watermark, feed_mark FROM crawler_ops.progress WHERE task_id = %s", (task,)
        ).fetchone()
        pages = conn.execute("SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s", (task,)).fetchone()
    return (*(row or (None, None)), pages[0] if pages else 0)


@pytest.mark.parametrize("kind", list(FEEDS))
def test_a_feed_is_crawled_exactly_then_incrementally_down_to_the_mark(
    kind, source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=1_050, ref=REF, in_window_share=0.5, append_step_s=60, feed={"next": kind})
    cfg = feed_task(unique_id, kind)

    assert run_dag(cfg, REF) == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    first = {m.key for m in messages}
    assert not duplicates(messages)
    assert first == truth(source, unique_id, REF), "exactly the window's records"
    asked = positions(feed_requests(source, unique_id))
    assert asked[0] is None and len(set(asked)) == len(asked), f"no page fetched twice: {asked}"
    assert len(asked) == pages_to_window(source, unique_id, 1_050, REF), "stopped after the first page all older"
    pages, mark, rows = feed_state(pg_uri, unique_id)
    assert pages == len(asked) and mark is not None and rows == 0, "plan closed: pages counted, mark saved, rows pruned"

    source.append(unique_id, 250)
    source.clear_requests(unique_id)
    assert run_dag(cfg, LATER) == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert not duplicates(messages)
    later = {m.key for m in messages} - first
    assert later == truth(source, unique_id, LATER) - first and len(later) == 250, "only the appended records"
    # 250 new records: pages 1-2 hold 200 of them, page 3 the last 50 and the mark (the old newest record)
    asked = positions(feed_requests(source, unique_id))
    assert len(asked) == 3 and asked[0] is None, f"stopped at the mark on the third page: {asked}"
    assert watermark(pg_uri, unique_id) == pages + 3


@pytest.mark.parametrize(
    ("kind", "resume", "point"),
    [
        ("cursor", "retry", "before_commit"),
        ("link_header", "next_run", "before_commit"),
        ("next_link", "retry", "before_commit"),
        ("cursor", "retry", "feed_page_done"),
        ("header_cursor", "retry", "before_commit"),
    ],
)
def test_a_sigkill_mid_walk_resumes_at_the_stored_position_losing_nothing_duplicating_one_page(
    kind, resume, point, source, kafka_bootstrap, pg_uri, unique_id
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0, feed={"next": kind})
    cfg = feed_task(unique_id, kind)
    run = RunContext(cfg=cfg, run_id="feed-kill", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)

    # before_commit: the third page reached Kafka, not yet confirmed; feed_page_done: the third page was recorded done
    worker = spawn_chunk(cfg, run.run_id, REF, chunk, kill={"point": point, "nth": 3})
    worker.communicate(timeout=300)
    assert worker.returncode == -signal.SIGKILL
    before = positions(feed_requests(source, unique_id))
    assert len(before) == 3

    if resume == "retry":  # Airflow's retry of the killed task instance, with the same planned chunk
        result = crawl_chunk(replace(run, try_number=2), chunk)
        assert commit_run(run, [chunk], [result]).status == "success"
    else:  # the killed run ends without its pages: its commit keeps the open plan, and the next run continues it
        assert commit_run(run, [chunk], []).status == "failed"
        assert feed_state(pg_uri, unique_id)[:2] == (None, None), "no mark, no watermark before the plan completes"
        nxt = replace(run, run_id="feed-next")
        (resumed,) = plan_run(nxt)
        assert resumed.batches[0].lo == chunk.batches[0].lo + 2, "the next run resumes at the page in flight"
        result = crawl_chunk(nxt, resumed)
        assert commit_run(nxt, [resumed], [result]).status == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert {m.key for m in messages} == truth(source, unique_id, REF), "nothing lost"
    asked = Counter(positions(feed_requests(source, unique_id)))
    if point == "before_commit":
        assert 0 < len(duplicates(messages)) <= 100, "at most the page in flight published again"
        assert [p for p, n in asked.items() if n > 1] == [before[2]], "only the killed page fetched again"
    else:
        assert not duplicates(messages) and max(asked.values()) == 1, "a page recorded done is never read again"
    assert feed_state(pg_uri, unique_id)[0] == 10


@pytest.mark.parametrize("kind", ["next_link", "link_header"])
def test_a_next_link_to_another_host_is_refused_naming_it(kind, source, pg_uri, unique_id, run_dag):
    other = "http://elsewhere.invalid:8080"
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0, feed={"next": kind, "other_host": other})
    cfg = feed_task(unique_id, kind)

    assert run_dag(cfg, REF) == "failed"

    errors = json.dumps(run_record(pg_uri, unique_id)["errors"])
    assert "elsewhere.invalid:8080" in errors and "refused" in errors, errors
    assert positions(feed_requests(source, unique_id)) == [None], "the link was never followed"


def test_a_cursor_refused_on_resume_fails_naming_the_page_and_the_reset(source, pg_uri, unique_id):
    source.create(unique_id, total=600, ref=REF, in_window_share=1.0, feed={"next": "cursor"})
    cfg = feed_task(unique_id, "cursor", max_attempts=1)
    run = RunContext(cfg=cfg, run_id="feed-expired", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)
    worker = spawn_chunk(cfg, run.run_id, REF, chunk, kill={"point": "before_commit", "nth": 2})
    worker.communicate(timeout=300)
    source.create(unique_id, total=600, ref=REF, in_window_share=1.0, feed={"next": "cursor", "expire_cursors": True})

    with pytest.raises(Exception, match=r"refused feed page 1's stored position 'o500'.*\"reset\": true"):
        crawl_chunk(replace(run, try_number=2), chunk)


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_with_exactly_once_delivery_a_sigkill_mid_walk_publishes_every_record_once(
    point, source, kafka_bootstrap, pg_uri, unique_id
):
    source.create(unique_id, total=800, ref=REF, in_window_share=1.0, feed={"next": "cursor"})
    cfg = feed_task(unique_id, "cursor", kafka={"delivery": "exactly_once"})
    run = RunContext(cfg=cfg, run_id="feed-eo", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)

    # before_commit: the third page's transaction is open; after_commit: Kafka committed it, PostgreSQL did not
    worker = spawn_chunk(cfg, run.run_id, REF, chunk, kill={"point": point, "nth": 3})
    worker.communicate(timeout=300)
    assert worker.returncode == -signal.SIGKILL
    result = crawl_chunk(replace(run, try_number=2), chunk)
    assert commit_run(run, [chunk], [result]).status == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert {m.key for m in messages} == truth(source, unique_id, REF), "nothing lost"
    assert not duplicates(messages), "nothing published twice (read_committed)"
    asked = Counter(positions(feed_requests(source, unique_id)))
    assert [n for n in asked.values() if n > 1] == [2], "the killed page read again (for its next position only)"
    assert result["published"] == 600, (
        "the retry's six pages, the killed one counted once (from its marker if committed)"
    )


def test_a_dry_run_walks_the_feed_and_records_nothing(source, kafka_bootstrap, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=1_050, ref=REF, in_window_share=0.5, feed={"next": "cursor"})
    cfg = feed_task(unique_id, "cursor")

    assert run_dag(cfg, REF, conf={"dry_run": True}) == "success"

    asked = positions(feed_requests(source, unique_id))
    assert asked[0] is None and 1 < len(asked) < 11 and len(set(asked)) == len(asked)
    assert feed_state(pg_uri, unique_id) == (None, None, 0), "no progress, no mark, no page rows"
    with pytest.raises(MissingTopic):
        read_topic(kafka_bootstrap, cfg.kafka.topic, timeout=5)


def test_records_appended_while_a_plan_is_open_wait_for_the_run_after_it(source, kafka_bootstrap, pg_uri, unique_id):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0, append_step_s=60, feed={"next": "cursor"})
    before = truth(source, unique_id, REF)
    cfg = feed_task(unique_id, "cursor")
    run = RunContext(cfg=cfg, run_id="feed-open", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)
    worker = spawn_chunk(cfg, run.run_id, REF, chunk, kill={"point": "before_commit", "nth": 3})
    worker.communicate(timeout=300)
    assert commit_run(run, [chunk], []).status == "failed"

    source.append(unique_id, 150)  # at the front of the feed: the open plan's stored positions stay valid
    resumed = replace(run, run_id="feed-resumed")
    (rest,) = plan_run(resumed)
    assert commit_run(resumed, [rest], [crawl_chunk(resumed, rest)]).status == "success"
    assert {m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)} == before, "the open plan's records only"

    source.clear_requests(unique_id)
    after = replace(run, run_id="feed-after")
    (plan,) = plan_run(after)
    assert commit_run(after, [plan], [crawl_chunk(after, plan)]).status == "success"
    keys = {m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}
    assert keys - before == truth(source, unique_id, REF) - before and len(keys - before) == 150
    assert len(feed_requests(source, unique_id)) == 2, "150 new records: the second page holds the plan's mark"


@pytest.mark.parametrize(
    ("kind", "end"),
    [("cursor", "scroll"), ("next_link", "scroll"), ("next_link", "self"), ("link_header", "self")],
)
def test_a_feed_that_ends_on_an_empty_page_with_a_cursor_or_on_a_page_naming_itself_ends_there(
    kind, end, source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=250, ref=REF, in_window_share=1.0, feed={"next": kind, "end": end})
    cfg = feed_task(unique_id, kind)

    assert run_dag(cfg, REF) == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert not duplicates(messages) and {m.key for m in messages} == truth(source, unique_id, REF)
    asked = positions(feed_requests(source, unique_id))
    # Pages of 100, 100 and 50 records; a scroll answers one more page, empty, before the walk stops.
    assert len(asked) == (4 if end == "scroll" else 3), f"the walk stopped at the feed's end: {asked}"
    assert run_record(pg_uri, unique_id)["status"] == "success"
    assert watermark(pg_uri, unique_id) == len(asked)
