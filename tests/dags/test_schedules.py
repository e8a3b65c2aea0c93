"""Cron schedules are read in the configured zone, and each run's data interval runs from the previous fire to its
own, so the runs Airflow plans (scheduled or backfilled) tile time with neither gaps nor overlaps, even for
irregular crons. Checked on the DAG as the scheduler sees it (serialized), through the function that
``airflow backfill create`` plans its runs with."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from airflow.models.backfill import _get_info_list
from airflow.serialization.definitions.dag import SerializedDAG
from airflow.serialization.serialized_objects import DagSerialization

from crawler_ops.config import CrawlTaskConfig, parse_config
from crawler_ops.factory.crawl import build_crawl_dag

SHANGHAI = ZoneInfo("Asia/Shanghai")


def scheduler_dag(**settings: object) -> SerializedDAG:
    loaded = parse_config({"tasks": [{"id": "sched", "kafka": {"topic": "t"}, **settings}]})
    assert dict(loaded.errors) == {}
    return DagSerialization.from_dict(DagSerialization.to_dict(build_crawl_dag(loaded.tasks[0])))


def backfill_intervals(dag: SerializedDAG, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    infos = _get_info_list(from_date=start, to_date=end, reverse=False, dag=dag)
    return [(info.data_interval.start, info.data_interval.end) for info in infos if info.data_interval]


def local_hours(moments: list[datetime]) -> list[int]:
    return [m.astimezone(SHANGHAI).hour for m in moments]


@pytest.mark.parametrize(
    ("schedule", "hours"),
    [("0 9,18 * * *", {9, 18}), ("0 9 * * 1-5", {9}), ("@daily", {0}), ("30 */6 * * *", {0, 6, 12, 18})],
    ids=["twice-a-day", "weekdays", "daily", "every-6h"],
)
def test_backfill_runs_tile_the_range_each_from_the_previous_fire_to_its_own(schedule: str, hours: set[int]) -> None:
    dag = scheduler_dag(schedule=schedule)
    start, end = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 15, tzinfo=UTC)

    intervals = backfill_intervals(dag, start, end)

    assert len(intervals) >= 10
    for (_, previous_end), (next_start, _) in itertools.pairwise(intervals):
        assert previous_end == next_start, f"{schedule}: gap or overlap at {previous_end} / {next_start}"
    assert set(local_hours([s for s, _ in intervals] + [e for _, e in intervals])) == hours
    assert start <= intervals[0][0] and intervals[-1][0] <= end, "runs start at fires within the range"


def test_an_irregular_cron_gives_each_run_the_time_since_the_previous_fire() -> None:
    twice = backfill_intervals(
        scheduler_dag(schedule="0 9,18 * * *"), datetime(2026, 10, 5, tzinfo=UTC), datetime(2026, 10, 7, tzinfo=UTC)
    )
    weekdays = backfill_intervals(
        scheduler_dag(schedule="0 9 * * 1-5"),
        datetime(2026, 10, 8, tzinfo=SHANGHAI),  # a Thursday
        datetime(2026, 10, 13, tzinfo=SHANGHAI),
    )

    assert twice == [
        (datetime(2026, 10, 5, 9, tzinfo=SHANGHAI), datetime(2026, 10, 5, 18, tzinfo=SHANGHAI)),
        (datetime(2026, 10, 5, 18, tzinfo=SHANGHAI), datetime(2026, 10, 6, 9, tzinfo=SHANGHAI)),
        (datetime(2026, 10, 6, 9, tzinfo=SHANGHAI), datetime(2026, 10, 6, 18, tzinfo=SHANGHAI)),
        (datetime(2026, 10, 6, 18, tzinfo=SHANGHAI), datetime(2026, 10, 7, 9, tzinfo=SHANGHAI)),
    ]
    # Friday's run covers Thursday 09:00 to Friday 09:00; Monday's covers the weekend from Friday 09:00.
    assert [(e - s) for s, e in weekdays] == [timedelta(days=1), timedelta(days=3), timedelta(days=1)]
    assert [s.astimezone(SHANGHAI).strftime("%a") for s, _ in weekdays] == ["Thu", "Fri", "Mon"]


def test_the_schedule_zone_is_configurable_and_a_naive_start_date_is_read_in_it() -> None:
    utc_daily = backfill_intervals(
        scheduler_dag(schedule="@daily", schedule_timezone="UTC"),
        datetime(2026, 10, 5, tzinfo=UTC),
        datetime(2026, 10, 6, tzinfo=UTC),
    )
    naive = CrawlTaskConfig.model_validate({"id": "a", "kafka": {"topic": "t"}, "start_date": "2026-03-01"})
    offset = CrawlTaskConfig.model_validate(
        {"id": "a", "kafka": {"topic": "t"}, "start_date": "2026-03-01T00:00:00+00:00", "schedule_timezone": "UTC"}
    )

    assert utc_daily[0] == (datetime(2026, 10, 5, tzinfo=UTC), datetime(2026, 10, 6, tzinfo=UTC))
    assert naive.start_date == datetime(2026, 3, 1, tzinfo=SHANGHAI)
    assert offset.start_date == datetime(2026, 3, 1, tzinfo=UTC)


def test_an_unknown_schedule_zone_is_a_per_task_config_error() -> None:
    loaded = parse_config(
        {
            "tasks": [
                {"id": "good", "kafka": {"topic": "g"}},
                {"id": "bad", "kafka": {"topic": "b"}, "schedule_timezone": "Asia/Beijing"},
            ]
        },
        "tasks.yaml",
    )

    assert [t.id for t in loaded.tasks] == ["good"]
    assert "field 'schedule_timezone'" in loaded.errors["bad"] and "Asia/Beijing" in loaded.errors["bad"]
