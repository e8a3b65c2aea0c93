"""A watched task: when its trigger announces the source's total, the config that asks for a watch, and the DAG
scheduled on the watch Asset (alone, or beside the clock)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.factory.crawl import build_crawl_dag
from crawler_ops.hooks.store.watch import WatchState
from crawler_ops.triggers.source_moved import CLASSPATH, SourceMovedTrigger, should_announce

REFIRE_S = 900


@pytest.mark.parametrize(
    ("total", "state", "news"),
    [
        (300, WatchState(None, None, None), True),
        (300, WatchState(300, None, None), False),
        (340, WatchState(300, None, None), True),
        (340, WatchState(300, 340, 10.0), False),
        (340, WatchState(300, 340, REFIRE_S + 1.0), True),
        (380, WatchState(300, 340, 10.0), True),
        (340, WatchState(340, 340, 10.0), False),
        (250, WatchState(300, None, None), True),
    ],
    ids=[
        "never-committed",
        "nothing-new",
        "new-records",
        "announced-and-not-yet-planned",
        "announced-long-ago-and-still-not-committed",
        "moved-again-after-an-announcement",
        "announced-and-committed",
        "shrank",
    ],
)
def test_a_total_is_announced_when_no_commit_saw_it_and_it_was_not_announced_lately(
    total: int, state: WatchState, news: bool
) -> None:
    assert should_announce(total, state, REFIRE_S) is news


def task(**overrides: Any) -> CrawlTaskConfig:
    base: dict[str, Any] = {"id": "jobs", "kafka": {"topic": "jobs"}, "schedule": None, "watch": {"every_s": 30}}
    return CrawlTaskConfig.model_validate(base | overrides)


def test_the_trigger_serializes_to_what_rebuilds_it_in_the_triggerer() -> None:
    cfg = task()
    dag = build_crawl_dag(cfg)
    (watcher,) = dag.timetable.asset_condition.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == CLASSPATH
    rebuilt = SourceMovedTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs["every_s"] == 30 and kwargs["crawl_task"] == "jobs"
    assert CrawlTaskConfig.model_validate({**cfg.model_dump(), "source": kwargs["source"]}).source == cfg.source


def test_a_watch_alone_schedules_the_dag_on_the_watch_asset_and_with_a_cron_beside_the_clock() -> None:
    from airflow.sdk import Asset, AssetOrTimeSchedule

    alone = build_crawl_dag(task())
    assert isinstance(alone.timetable.asset_condition, Asset)
    assert alone.timetable.asset_condition.name == "crawler_ops_watch_jobs"

    with_clock = build_crawl_dag(task(schedule="*/30 * * * *"))
    assert isinstance(with_clock.timetable, AssetOrTimeSchedule)
    assert with_clock.timetable.timetable.expression == "*/30 * * * *"
    assert with_clock.timetable.asset_condition.name == "crawler_ops_watch_jobs"

    unwatched = build_crawl_dag(task(watch=None, schedule="*/30 * * * *"))
    assert unwatched.timetable.expression == "*/30 * * * *" and not isinstance(unwatched.timetable, AssetOrTimeSchedule)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"source": {"paginator": {"type": "cursor", "cursor_path": "next"}}}, "feed has no total to watch"),
        ({"source": {"count_path": None}}, "no count_path"),
        ({"schedule": "@once"}, "cannot run beside the watch"),
        ({"watch": {"every_s": 1}}, "greater than or equal to 5"),
    ],
    ids=["feed", "no-count", "special-schedule", "too-often"],
)
def test_a_watch_the_source_cannot_answer_is_refused_with_the_reason(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        task(**overrides)
