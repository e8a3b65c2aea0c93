"""One phase of the fleet benchmark, whatever drives its runs: what it works with (:class:`Bench`), how it is
switched off and drained, how a watched fleet warms up before its window, and the figures every phase has (runs,
pools, load, CPU, the machine's busy share, change lag; with a watch, the polls: :mod:`.watch`)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawlbench import environment
from crawlbench.common import BenchError
from crawlbench.fleet.cpu import CpuMeter
from crawlbench.fleet.fleet import OFF, Append, Fleet, Schedule, write_config
from crawlbench.fleet.runs import SCHEDULED, WATCHED, ended_between, fleet_runs, phase_figures
from crawlbench.fleet.sampler import Sampler, load_figures, pool_figures
from crawlbench.fleet.services import FleetAirflow, active_runs, drain, wait_schedule
from crawlbench.fleet.watch import (
    WITHIN_S,
    Plan,
    Reading,
    announcements,
    change_lags,
    changes,
    count_requests,
    lag_figures,
    plan_records,
    plans_between,
    poll_figures,
    polls_made,
    take_reading,
    tasks_asked,
    tasks_crawled,
    window_figures,
)
from crawlbench.source import SourceAdmin

POOL = "crawler_source_demo_source"
WARM_UP_TIMEOUT_S = 600
ASKS_EVERY_S = 5.0  # a caught-up fleet's warm-up reads the counters of the watches not yet seen asking this often


@dataclass
class Bench:
    """What every phase works with: the scenario, the stack, the fleet and its config, the running Airflow, the CPU
    meter, the sampler and the source's admin client."""

    args: argparse.Namespace
    stack: environment.Stack
    fleet: Fleet
    config: Path
    airflow: FleetAirflow
    meter: CpuMeter
    admin: SourceAdmin
    folder: Path
    sampler: Sampler | None = None

    @property
    def schedule(self) -> Schedule:
        return Schedule(self.args.cron, self.args.watch_every)

    @property
    def watched(self) -> bool:
        return self.args.watch_every is not None

    @property
    def caught_up(self) -> bool:
        """Every task's progress was set to its source's total before the unpause (``--caught-up``)."""
        return bool(self.args.caught_up)

    @property
    def run_types(self) -> tuple[str, ...]:
        return WATCHED if self.watched else SCHEDULED

    def reading(self) -> Reading:
        return take_reading(self.meter, self.airflow, self.admin, self.fleet, counts=self.watched)


def stop_and_drain(bench: Bench, drain_min: float) -> tuple[dict[str, float], Reading | None, Reading]:
    """Switch the schedule (and the watches) off, wait until the dag-processor has parsed it and the watches are
    gone, let the runs drain; the times, the reading once the watches were gone (a watched fleet) and the settled
    one."""
    write_config(bench.config, bench.fleet, OFF)
    off_s = wait_schedule(bench.airflow, bench.fleet, OFF)
    off = bench.reading() if bench.watched else None
    drain_s = drain(bench.airflow, bench.fleet, drain_min * 60)
    settled = bench.reading()
    return {"switch_off_s": off_s, "drain_s": drain_s, "settled": settled.at}, off, settled


def warm_up(bench: Bench, before: Reading) -> dict[str, float]:
    """A watched fleet just unpaused (``before``: the reading taken just before the unpause), until its window may
    start: every watch runs in the triggerer (its trigger assigned to one), and then

    - started from empty: the first crawls the watches announced (every data set is new) have succeeded and no run
      is going;
    - started caught up (``--caught-up``): every watch has asked its source at least once since the unpause (its data
      set's count requests grew by more than the task's plans recorded since then). There is no first crawl to wait
      for: each watch finds the total its task's progress holds and announces nothing.

    The seconds each step took."""
    up_s = wait_schedule(bench.airflow, bench.fleet, bench.schedule)
    started = time.monotonic()
    if bench.caught_up:
        return {"watches_up_s": up_s, "first_asks_s": wait_first_asks(bench, before, started)}
    while True:
        done = tasks_crawled(bench.stack.pg_uri, bench.fleet)
        if done == bench.fleet.size and not active_runs(bench.airflow, bench.fleet):
            return {"watches_up_s": up_s, "first_crawls_s": time.monotonic() - started}
        if time.monotonic() - started > WARM_UP_TIMEOUT_S:
            raise BenchError(f"only {done} of {bench.fleet.size} first crawls succeeded after {WARM_UP_TIMEOUT_S} s")
        time.sleep(2)


def wait_first_asks(bench: Bench, before: Reading, started: float) -> float:
    """Until every watch has asked its source since the reading ``before`` (:func:`.watch.tasks_asked`), the data
    sets' counters read again only for the watches not seen asking yet, every :data:`ASKS_EVERY_S`; the seconds from
    ``started`` (monotonic)."""
    if before.counts is None:
        raise ValueError("a watched fleet's reading holds the source's counters")
    waiting = set(bench.fleet.names)
    while True:
        now = count_requests(bench.admin, sorted(waiting))
        waiting -= tasks_asked(before.counts, now, plan_records(bench.stack.pg_uri, bench.fleet), before.at)
        if not waiting:
            return time.monotonic() - started
        if time.monotonic() - started > WARM_UP_TIMEOUT_S:
            asked = bench.fleet.size - len(waiting)
            raise BenchError(f"only {asked} of {bench.fleet.size} watches asked after {WARM_UP_TIMEOUT_S} s")
        time.sleep(ASKS_EVERY_S)


def watch_figures(
    bench: Bench, readings: tuple[Reading, Reading, Reading | None, Reading], plans: list[Plan]
) -> dict[str, Any]:
    """A watched phase's polls (due, made, on time) between its first two ``readings`` (window start, end), and the
    polls made from the third (the watches gone) to the fourth (drained)."""
    before, after, off, settled = readings
    polls = poll_figures(before, after, plans, bench.fleet.size, bench.args.watch_every)
    if off is not None and off.counts is not None and settled.counts is not None:
        polls["after_off"] = polls_made(off.counts, settled.counts, plans_between(plans, off.at, settled.at))
    return polls


def phase_result(
    bench: Bench, before: Reading, after: Reading, start: float, end: float,
    stopped: tuple[dict[str, float], Reading | None, Reading], appended: list[Append],
) -> dict[str, Any]:  # fmt: skip
    """The figures every phase has: runs, pools, load, CPU, the machine's busy share, change lag; with a watch, the
    polls."""
    times, off, settled = stopped
    runs = fleet_runs(bench.airflow, bench.fleet, bench.stack.pg_uri)
    figures = phase_figures(runs, bench.fleet, bench.args.cron, start, end, settled.at, bench.run_types)
    assert bench.sampler is not None
    samples = bench.sampler.samples.between(start, settled.at)
    ended = ended_between(runs, start, settled.at)
    figures.update(times, pool=pool_figures(samples, POOL), load=load_figures(samples))
    figures.update(cpu_s=settled.airflow_cpu - before.airflow_cpu, runs_ended=len(ended))
    figures.update(nothing_new_ended=sum(1 for r in ended if r.planned == 0), window=window_figures(before, after))
    plans = plan_records(bench.stack.pg_uri, bench.fleet)
    within = bench.args.watch_every + WITHIN_S if bench.watched else None
    # With a bound, the appends made in its last stretch of the window are left out: the switch-off may cut them off.
    counted = [a for a in appended if within is None or a.at <= end - within]
    figures["change_lag"] = lag_figures(change_lags(counted, plans), within)
    figures["change_lag"]["left_out_at_the_end"] = len(appended) - len(counted)
    if bench.watched:
        figures["watch"] = watch_figures(bench, (before, after, off, settled), plans)
        seen = changes(announcements(bench.airflow, bench.fleet), start, end)
        per_change = figures["runs_created"] / seen["changes"] if seen["changes"] else None
        figures["watch"].update(seen, runs_per_change=per_change)
    return figures
