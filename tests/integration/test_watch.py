"""A watched task's trigger against the demo source and PostgreSQL: it announces a total no commit saw, once, through
the task's rate limit (one count request an ask), not again while the run for it is on its way, and again when the
source moves after the crawl; a new trigger (a restarted triggerer) announces what moved while none was running and
nothing that was already crawled. Its run loop yields one event per move and keeps asking after a source error."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crawler_ops.factory.crawl import build_crawl_dag
from crawler_ops.triggers.source_moved import SourceMovedTrigger
from tests.support import make_task, query, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def trigger_of(cfg: Any) -> SourceMovedTrigger:
    (watcher,) = build_crawl_dag(cfg).timetable.asset_condition.watchers
    _, kwargs = watcher.trigger.serialize()
    return SourceMovedTrigger(**kwargs)  # as the triggerer rebuilds it


def test_a_total_no_commit_saw_is_announced_once_and_again_only_when_the_source_moves(
    source, pg_uri, unique_id, use_config
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, watch={"every_s": 5, "refire_s": 600}, source={"max_in_flight": 2})
    use_config(cfg, "tasks")
    trigger = trigger_of(cfg)
    source.clear_requests(unique_id)

    first = trigger.poll()
    assert first == {"task": unique_id, "total": 300, "committed": None}, "never crawled: news"
    trigger.keep(300)
    assert trigger.poll() is None, "announced, its run not yet planned: no second event"
    assert source.requests_seen(unique_id) == {"count": 2, "list": 0}, "an ask is one count request"

    assert str(build_crawl_dag(cfg).test(logical_date=REF, run_conf={}).state) == "success"
    assert watermark(pg_uri, unique_id) == 300
    assert trigger_of(cfg).poll() is None, "crawled: nothing new, for a new trigger too (a triggerer restart)"

    source.append(unique_id, 25)
    restarted = trigger_of(cfg)
    assert restarted.poll() == {"task": unique_id, "total": 325, "committed": 300}, "moved while nobody watched"


def test_the_run_loop_yields_one_event_per_move_and_asks_again_after_a_source_error(source, unique_id, use_config):
    source.create(unique_id, total=100, ref=REF - timedelta(days=1), in_window_share=1.0)
    cfg = make_task(unique_id, watch={"every_s": 5, "refire_s": 600})
    use_config(cfg, "tasks")
    trigger = trigger_of(cfg)
    trigger.every_s = 0.2  # the config's floor is 5 s; the loop is the same

    async def first_events(n: int) -> list[dict[str, Any]]:
        events = []
        stream = trigger.run()
        async for event in stream:
            events.append(event.payload)
            if len(events) == 1:
                source.faults(unique_id, error_rate=1.0)  # the next asks fail
                await asyncio.sleep(0.6)
                source.clear_faults(unique_id)
                source.append(unique_id, 5)
            if len(events) == n:
                await stream.aclose()
                return events
        return events

    events = asyncio.run(asyncio.wait_for(first_events(2), timeout=60))

    assert [e["total"] for e in events] == [100, 105]


def test_the_watches_of_a_process_share_one_database_connection_and_one_client_and_survive_a_lost_connection(
    source, pg_uri, unique_id, use_config
):
    from crawler_ops.triggers.source_moved import watch_store

    tasks = [make_task(f"{unique_id}_{i}", watch={"every_s": 5, "refire_s": 600}) for i in range(3)]
    for cfg in tasks:
        source.create(cfg.id, total=50, ref=REF, in_window_share=1.0)
    use_config(tasks[0], "tasks")
    triggers = [trigger_of(cfg) for cfg in tasks]

    assert [t.poll()["total"] for t in triggers] == [50, 50, 50]  # type: ignore[index]

    assert len({id(t.hook().client) for t in triggers}) == 1, "one keep-alive client for the source connection"
    store = watch_store(tasks[0].postgres_conn_id)
    backend = store.db.info.backend_pid
    query(pg_uri, "SELECT pg_terminate_backend(%s)", backend)
    source.append(tasks[1].id, 5)

    assert triggers[1].poll() == {"task": tasks[1].id, "total": 55, "committed": None}, "asked on a new connection"
    assert store.db.info.backend_pid != backend
    assert len(query(pg_uri, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", store.db.info.backend_pid)) == 1
    for trigger in triggers:
        asyncio.run(trigger.cleanup())
