"""What a phase of the fleet measures between two readings, and how fast the changes the appender made were crawled;
the polls of a watched fleet (``watch: {every_s: S}``) against what its watches were due to make.

Readings (:class:`Reading`), at a phase's start and end: the time, the CPU of every Airflow process and of the
triggerer's own tree (:mod:`.cpu`), the machine's CPU counters (:mod:`.machine`) and, for a watched fleet, the count
requests the demo source answered for each data set (its admin API's per-task counters, never cleared while the
benchmark runs).

The rules:

- **plans**: the crawler's run records (``crawler_ops.crawl_run``, the records ``import-progress`` writes left out).
  A plan asks the source's count endpoint once, then records its run in a transaction whose ``started_at``
  (PostgreSQL's ``now()``, the same clock as the benchmark's on this machine) is taken just after the count, with the
  ``total`` it counted. A plan that failed and was planned again keeps one record: its first count is missed.
- **polls made** in ``[a, b)``: the count requests the source answered for the fleet's data sets between the two
  readings, less one per plan recorded in between (the crawls' own counts). Nothing else asks for a count in a phase:
  the old loop's poll and the topic check run outside them. A plan that counted just before a reading and recorded
  just after it is off by one.
- **polls due**: every task asks every ``S`` seconds, so ``tasks x (b - a) / S``. A watch sleeps ``S`` after each ask,
  so its period is ``S`` plus the ask's own time: a share just under 1 is the norm.
- **change lag**: for each append (task, moment its request was sent, the total it made), the first plan of that task
  recorded at or after the append whose counted total covers it (``total`` >= the append's); the lag is that plan's
  ``started_at`` minus the append: the moment the crawl knew of the change, exact to the plan's count. An append no
  plan covered by the end is not crawled (and counts as not within any bound).
- **changes**: the polls that found a task's source moved, as the watches announced them: the Asset events their
  triggers fired in the window (``asset_event``, the trigger's payload holds the total), each distinct (task, total)
  one change; a (task, total) announced again is a repeat (a refire). Runs per change is the phase's runs over that:
  1 when every change got its own run, below 1 when a run took up several (events queued while its DAG's one run was
  going), above when runs came without a change (a cron beside the watch).
- **CPU per poll**: the triggerer's CPU between the readings over the polls made (the watch's whole cost: its event
  loop, its threads' requests and database reads, and the triggerer's own loop, which runs every second with or
  without watches); the same over the triggerer's background (its CPU per second with no watch running, read while
  the fleet is switched off, times the seconds, taken off first); the same for every Airflow process; each against
  the old loop's count request, as a ratio.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg

from crawlbench.common import BenchError
from crawlbench.fleet.cpu import CpuMeter, tree_cpu
from crawlbench.fleet.fleet import Append, Fleet
from crawlbench.fleet.machine import CpuStat, busy_share, read_cpu_stat
from crawlbench.fleet.runs import spread
from crawlbench.fleet.services import WATCH_ASSET, FleetAirflow
from crawlbench.metadata import utc
from crawlbench.source import SourceAdmin

IMPORTED = "import"  # the mode of the run records import-progress writes: no plan, no count
WITHIN_S = 30.0  # a change is crawled in time within one poll period and this


@dataclass(frozen=True)
class Plan:
    """One plan of a fleet task: its run, when it recorded the run (epoch s, just after its count), the total it
    counted (None: it failed before counting) and its batches."""

    task: str
    run_id: str
    started: float
    total: int | None
    planned: int


@dataclass(frozen=True)
class Reading:
    """What is read at a phase's start or end (CPU in seconds since the meter or the triggerer started)."""

    at: float
    airflow_cpu: float
    triggerer_cpu: float | None
    machine: CpuStat
    counts: dict[str, int] | None  # count requests the source answered per data set; None: not read


def count_requests(admin: SourceAdmin, names: Iterable[str]) -> dict[str, int]:
    """The count requests the demo source has answered for each data set (its admin API's request counters)."""
    counts = {}
    for name in names:
        answer = admin.http.get(f"/admin/tasks/{name}")
        if answer.status_code != httpx.codes.OK:
            raise BenchError(f"demo source: GET /admin/tasks/{name} answered {answer.status_code}")
        counts[name] = int(answer.json()["requests"].get("count", 0))
    return counts


def take_reading(
    meter: CpuMeter, airflow: FleetAirflow, admin: SourceAdmin, fleet: Fleet, counts: bool
) -> Reading:  # fmt: skip
    """A :class:`Reading` now; the source's counters only with ``counts`` (a watched fleet)."""
    at = time.time()
    requests = count_requests(admin, fleet.names) if counts else None
    triggerer = tree_cpu(airflow.triggerer) if airflow.triggerer is not None else None
    return Reading(at, meter.total(), triggerer, read_cpu_stat(), requests)


def plan_records(pg_uri: str, fleet: Fleet) -> list[Plan]:
    """Every plan of the fleet's tasks (:class:`Plan`), in the order they were recorded."""
    with psycopg.connect(pg_uri) as conn:
        rows = conn.execute(
            "SELECT task_id, run_id, started_at, total, planned FROM crawler_ops.crawl_run "
            "WHERE task_id = ANY(%s) AND mode <> %s ORDER BY started_at",
            (fleet.names, IMPORTED),
        ).fetchall()
    return [
        Plan(task, run_id, utc(started) or 0.0, None if total is None else int(total), int(planned))
        for task, run_id, started, total, planned in rows
    ]


def plans_between(plans: Iterable[Plan], start: float, end: float) -> int:
    """How many plans were recorded in ``[start, end)``: one count request each."""
    return sum(1 for p in plans if start <= p.started < end)


def tasks_asked(before: Mapping[str, int], after: Mapping[str, int], plans: Iterable[Plan], since: float) -> set[str]:
    """The tasks whose watch asked the source at least once between two readings of the counters, the first taken
    at ``since``: more count requests answered for the task's data set than its plans recorded since then."""
    own = Counter(p.task for p in plans if p.started >= since)
    return {name for name, n in after.items() if n - before.get(name, 0) - own[name] > 0}


def polls_due(tasks: int, seconds: float, every_s: float) -> float:
    """The asks ``tasks`` watches make in ``seconds`` when each asks every ``every_s``."""
    return tasks * seconds / every_s


def polls_made(before: Mapping[str, int], after: Mapping[str, int], plans: int) -> int:
    """The count requests answered between two readings of the counters, less the ``plans``' own."""
    return sum(n - before.get(name, 0) for name, n in after.items()) - plans


def change_lags(appends: Sequence[Append], plans: Sequence[Plan]) -> list[float | None]:
    """For each append, in order, the seconds until the first plan of its task that covered it (module rule); None
    when no plan did."""
    by_task: dict[str, list[Plan]] = {}
    for plan in sorted(plans, key=lambda p: p.started):
        by_task.setdefault(plan.task, []).append(plan)
    lags: list[float | None] = []
    for change in appends:
        covering = (
            p for p in by_task.get(change.task, ()) if p.started >= change.at and (p.total or 0) >= change.total
        )
        first = next(covering, None)
        lags.append(None if first is None else first.started - change.at)
    return lags


def lag_figures(lags: Sequence[float | None], within_s: float | None) -> dict[str, Any]:
    """Spread of the lags of the crawled appends, how many were not crawled, and the share of all appends crawled
    within ``within_s`` (None: no bound)."""
    crawled = [lag for lag in lags if lag is not None]
    within = None
    if within_s is not None and lags:
        within = sum(1 for lag in crawled if lag <= within_s) / len(lags)
    return {
        "appends": len(lags),
        "crawled": len(crawled),
        "not_crawled": len(lags) - len(crawled),
        "lag_s": spread(crawled),
        "within_s": within_s,
        "within_share": within,
    }


@dataclass(frozen=True)
class Announcement:
    """One event a watch fired (an Asset event from its trigger): the task, the total announced, when (epoch s)."""

    task: str
    total: int | None
    at: float


def announcements(airflow: FleetAirflow, fleet: Fleet) -> list[Announcement]:
    """Every event the fleet's watches fired, from the metadata DB (``asset_event`` of the fleet tasks' watch Assets,
    the trigger's payload in ``extra``)."""
    prefix = f"{WATCH_ASSET}{fleet.base}_"
    rows = airflow.rows(
        "SELECT a.name, e.extra::text, e.timestamp FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "WHERE substr(a.name, 1, :n) = :prefix",
        n=len(prefix),
        prefix=prefix,
    )
    found = []
    for name, extra, at in rows:
        total = (json.loads(extra or "{}").get("payload") or {}).get("total")
        found.append(
            Announcement(str(name).removeprefix(WATCH_ASSET), None if total is None else int(total), utc(at) or 0.0)
        )
    return found


def changes(announced: Iterable[Announcement], start: float, end: float) -> dict[str, int]:
    """The changes the watches saw in ``[start, end)``: each distinct (task, total) announced is one, a poll that
    found the source moved; an announcement of a (task, total) already announced is a repeat."""
    events = [(a.task, a.total) for a in announced if start <= a.at < end]
    return {"announced": len(events), "changes": len(set(events)), "repeats": len(events) - len(set(events))}


def ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def poll_figures(before: Reading, after: Reading, plans: Sequence[Plan], tasks: int, every_s: float) -> dict[str, Any]:
    """The polls of a watched fleet between two readings: due, made, on time; the CPU the triggerer and all of
    Airflow used meanwhile."""
    if before.counts is None or after.counts is None:
        raise ValueError("the polls need the source's counters at both readings")
    seconds = after.at - before.at
    own = plans_between(plans, before.at, after.at)
    made = polls_made(before.counts, after.counts, own)
    due = polls_due(tasks, seconds, every_s)
    triggerer = None
    if before.triggerer_cpu is not None and after.triggerer_cpu is not None:
        triggerer = after.triggerer_cpu - before.triggerer_cpu
    return {
        "seconds": seconds,
        "every_s": every_s,
        "due": due,
        "made": made,
        "plan_counts": own,
        "on_time": ratio(made, due),
        "triggerer_cpu_s": triggerer,
        "airflow_cpu_s": after.airflow_cpu - before.airflow_cpu,
    }


def poll_cpu(polls: Mapping[str, Any], old_cpu_s: float, triggerer_quiet_per_s: float | None) -> dict[str, Any]:
    """CPU per poll made (:func:`poll_figures`) of the triggerer, of the triggerer over its own background
    (``triggerer_quiet_per_s``: its CPU s per s with no watch running; None: not measured) and of all of Airflow,
    each also against the old loop's count request (``old_cpu_s``)."""
    made, triggerer = polls["made"], polls["triggerer_cpu_s"]
    per_poll = ratio(triggerer, made) if made > 0 else None
    marginal = None
    if triggerer is not None and triggerer_quiet_per_s is not None and made > 0:
        marginal = (triggerer - triggerer_quiet_per_s * polls["seconds"]) / made
    airflow = ratio(polls["airflow_cpu_s"], made) if made > 0 else None
    return {
        "triggerer_per_poll_s": per_poll,
        "triggerer_vs_old": ratio(per_poll, old_cpu_s),
        "triggerer_marginal_per_poll_s": marginal,
        "triggerer_marginal_vs_old": ratio(marginal, old_cpu_s),
        "airflow_per_poll_s": airflow,
        "airflow_vs_old": ratio(airflow, old_cpu_s),
    }


def window_figures(before: Reading, after: Reading) -> dict[str, Any]:
    """Of any phase: its window's seconds, Airflow's CPU and the machine's CPU busy share in it."""
    return {
        "seconds": after.at - before.at,
        "airflow_cpu_s": after.airflow_cpu - before.airflow_cpu,
        "machine_busy": busy_share(before.machine, after.machine),
    }


def tasks_crawled(pg_uri: str, fleet: Fleet) -> int:
    """How many of the fleet's tasks have a successful crawl run, an import not counted (a watched fleet's first
    crawls, at its start)."""
    with psycopg.connect(pg_uri) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT task_id) FROM crawler_ops.crawl_run WHERE task_id = ANY(%s) AND status = 'success' "
            "AND mode <> %s",
            (fleet.names, IMPORTED),
        ).fetchone()
    return int(row[0]) if row else 0
