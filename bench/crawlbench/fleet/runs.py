"""The fleet's runs as figures: every run of its DAGs from the metadata DB (``dag_run``, ``task_instance``) beside
its record in the crawler's PostgreSQL (``crawler_ops.crawl_run``: what its plan planned and fetched).

A phase's figures are those of the runs of its window ``[start, end)``: the cron's fire times in the window are the
ticks due (per DAG; summed over the fleet), a scheduled run whose ``run_after`` (its tick) lies in the window served
that tick. A watched fleet's runs are also those its watch Assets triggered (``asset_triggered``, ``run_after`` the
moment the Asset's event was queued for the DAG). A run's start lag is its first task instance's start minus its
``run_after``; a run that never started counts with the lag it had when the phase settled (a lower bound). Runs whose
plan found nothing new have ``planned`` = 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from croniter import croniter

from crawlbench.fleet.fleet import Fleet
from crawlbench.fleet.services import FleetAirflow
from crawlbench.metadata import utc

FINISHED = ("success", "failed")
SCHEDULED = ("scheduled",)
WATCHED = ("scheduled", "asset_triggered")


@dataclass(frozen=True)
class Run:
    """One DAG run of the fleet (times in epoch seconds)."""

    dag_id: str
    run_id: str
    run_type: str
    run_after: float
    state: str
    start: float | None
    end: float | None
    first_ti_start: float | None
    tis: int
    tis_ran: int  # task instances that ran in a process of their own (a pid): not those skipped
    chunks: int
    planned: int | None  # None: no run record (its plan never ran)
    fetched: int | None


def fire_times(cron: str, start: float, end: float) -> list[float]:
    """The cron's fire times (UTC) in ``[start, end)``."""
    moments = croniter(cron, datetime.fromtimestamp(start, UTC) - timedelta(microseconds=1))
    fires = []
    while (moment := moments.get_next(datetime).timestamp()) < end:
        fires.append(moment)
    return fires


def fleet_runs(airflow: FleetAirflow, fleet: Fleet, pg_uri: str) -> list[Run]:
    """Every run of the fleet's DAGs, with its task instances counted and its crawl run record's counts."""
    prefix = fleet.dag_prefix
    rows = airflow.rows(
        "SELECT r.dag_id, r.run_id, r.run_type, r.run_after, r.state, r.start_date, r.end_date, min(t.start_date), "
        "count(t.task_id), count(t.pid), "
        "count(t.task_id) FILTER (WHERE t.task_id = 'crawl_chunk' AND t.map_index >= 0) "
        "FROM dag_run r LEFT JOIN task_instance t ON t.dag_id = r.dag_id AND t.run_id = r.run_id "
        "WHERE substr(r.dag_id, 1, :n) = :prefix GROUP BY r.id",
        n=len(prefix),
        prefix=prefix,
    )
    records = crawl_records(pg_uri, fleet)
    runs = []
    for dag_id, run_id, run_type, run_after, state, start, end, first, tis, ran, chunks in rows:
        planned, fetched = records.get((dag_id.removeprefix("crawl_"), run_id), (None, None))
        runs.append(
            Run(
                dag_id, run_id, str(run_type), utc(run_after) or 0.0, str(state), utc(start), utc(end), utc(first),
                int(tis), int(ran), int(chunks), planned, fetched,
            )
        )  # fmt: skip
    return runs


def crawl_records(pg_uri: str, fleet: Fleet) -> dict[tuple[str, str], tuple[int, int]]:
    """(planned batches, fetched records) of each crawl run record of the fleet's tasks, by (task, run id)."""
    with psycopg.connect(pg_uri) as conn:
        rows = conn.execute(
            "SELECT task_id, run_id, planned, fetched FROM crawler_ops.crawl_run WHERE task_id = ANY(%s)",
            (fleet.names,),
        ).fetchall()
    return {(task, run): (int(planned), int(fetched)) for task, run, planned, fetched in rows}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 < q <= 1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def spread(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95), "max": max(values, default=None)}


def phase_figures(
    runs: list[Run], fleet: Fleet, cron: str | None, start: float, end: float, settled: float,
    run_types: tuple[str, ...] = SCHEDULED,
) -> dict[str, Any]:  # fmt: skip
    """The figures of the phase whose runs (of ``run_types``) and ticks (``cron`` None: none) lie in ``[start, end)``
    and which settled (its runs drained) at ``settled``."""
    ticks = fire_times(cron, start, end) if cron else []
    window = [r for r in runs if r.run_type in run_types and start <= r.run_after < end]
    scheduled = sum(1 for r in window if r.run_type == "scheduled")
    started = [r for r in window if r.first_ti_start is not None]
    lags = [r.first_ti_start - r.run_after for r in started if r.first_ti_start is not None]
    lags_bound = lags + [settled - r.run_after for r in window if r.first_ti_start is None]
    finished = [r for r in window if r.state in FINISHED]
    durations = [r.end - r.start for r in finished if r.end is not None and r.start is not None]
    return {
        "cron": cron,
        "ticks_per_dag": len(ticks),
        "ticks_due": len(ticks) * fleet.size,
        "runs_created": len(window),
        "runs_by_type": dict(Counter(r.run_type for r in window)),
        "scheduled_created": scheduled,
        "served": scheduled / (len(ticks) * fleet.size) if ticks else None,
        "states": dict(Counter(r.state for r in window)),
        "left_active": sum(1 for r in window if r.state not in FINISHED),
        "never_started": len(window) - len(started),
        "start_lag_s": spread(lags),
        "start_lag_bound_s": spread(lags_bound),
        "duration_s": spread(durations),
        "tis_per_run": spread([float(r.tis) for r in finished]),
        "tis_ran_per_run": spread([float(r.tis_ran) for r in finished]),
        "chunks": sum(r.chunks for r in window),
        "nothing_new": sum(1 for r in window if r.planned == 0),
        "with_record": sum(1 for r in window if r.planned is not None),
        "fetched": sum(r.fetched or 0 for r in window),
        # Of any phase: in the first, the runs created at unpause for the tick before t0 (and a watched fleet's first
        # crawls).
        "runs_before_window": sum(1 for r in runs if r.run_type in run_types and r.run_after < start),
        "runs_after_window": sum(1 for r in runs if r.run_type in run_types and r.run_after >= end),
    }


def ended_between(runs: list[Run], start: float, end: float) -> list[Run]:
    """The runs (any kind, any tick) that ended in ``[start, end]``: the work a phase's CPU paid for."""
    return [r for r in runs if r.end is not None and start <= r.end <= end]
