"""What is read every few seconds while the fleet runs: the machine's 1-minute load average and its CPU busy share
since the previous sample (:mod:`.machine`), the task instances of each pool by state (how many wait ``scheduled``
for a slot of the source connection's pool), the fleet's runs by state, and the process tree's CPU (each process's
own time, the floor :class:`~crawlbench.fleet.cpu.CpuMeter` checks its total against)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from crawlbench.fleet.cpu import CpuMeter
from crawlbench.fleet.fleet import Fleet
from crawlbench.fleet.machine import busy_share, read_cpu_stat
from crawlbench.fleet.services import FleetAirflow, active_runs

EVERY_S = 5.0
WAITING = ("scheduled", "queued", "running")


@dataclass
class Sample:
    at: float
    load1: float
    pools: dict[str, dict[str, int]]
    runs: dict[str, int]
    busy: float | None = None  # the machine's CPU busy share since the previous sample


@dataclass
class Samples:
    taken: list[Sample] = field(default_factory=list)

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.taken if start <= s.at < end]


def pool_states(airflow: FleetAirflow) -> dict[str, dict[str, int]]:
    """Task instances by pool and state (scheduled: waiting for a slot or the executor; queued; running)."""
    rows = airflow.rows(
        "SELECT pool, state, count(*) FROM task_instance WHERE state IN :states GROUP BY pool, state",
        states=list(WAITING),
    )
    pools: dict[str, dict[str, int]] = {}
    for pool, state, n in rows:
        pools.setdefault(str(pool), {})[str(state)] = int(n)
    return pools


class Sampler(threading.Thread):
    """Takes a :class:`Sample` every :data:`EVERY_S` seconds until stopped."""

    def __init__(self, airflow: FleetAirflow, fleet: Fleet, meter: CpuMeter) -> None:
        super().__init__(name="fleet-sampler", daemon=True)
        self.airflow, self.fleet, self.meter = airflow, fleet, meter
        self.samples = Samples()
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        previous = read_cpu_stat()
        while not self.stop.is_set():
            try:
                self.meter.total()
                stat = read_cpu_stat()
                busy, previous = busy_share(previous, stat), stat
                self.samples.taken.append(
                    Sample(
                        time.time(),
                        os.getloadavg()[0],
                        pool_states(self.airflow),
                        active_runs(self.airflow, self.fleet),
                        busy,
                    )
                )
            except Exception as exc:  # noqa: BLE001 - a missed sample is reported, not fatal
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.stop.wait(EVERY_S)


def pool_figures(samples: list[Sample], pool: str) -> dict[str, Any]:
    """Of ``pool`` over the samples: the task instances waiting ``scheduled`` and running (median and peak)."""
    waiting = sorted(s.pools.get(pool, {}).get("scheduled", 0) for s in samples)
    running = sorted(s.pools.get(pool, {}).get("running", 0) for s in samples)
    if not samples:
        return {}
    return {
        "scheduled_median": waiting[len(waiting) // 2],
        "scheduled_max": waiting[-1],
        "running_median": running[len(running) // 2],
        "running_max": running[-1],
    }


def load_figures(samples: list[Sample]) -> dict[str, float]:
    """The load average and the machine's CPU busy share between two samples: median and peak."""
    loads = sorted(s.load1 for s in samples)
    if not loads:
        return {}
    figures = {"load1_median": loads[len(loads) // 2], "load1_max": loads[-1]}
    if busy := sorted(s.busy for s in samples if s.busy is not None):
        figures.update(busy_median=busy[len(busy) // 2], busy_max=busy[-1])
    return figures
