"""The fleet: N demo-source data sets, one crawl task each on the one default source connection (the old service's
shape: one API, a task per city), the config that makes them DAGs (its schedule switched on and off), and the new
records appended to a random share of the data sets while the fleet runs."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from crawlbench.common import REPO
from crawlbench.source import SourceAdmin, dataset_name

ZONE = "UTC"  # the cron is read in UTC, so the ticks the benchmark counts are the scheduler's
SHARD_FILES = sorted((REPO / "dags").glob("crawl_dags_*_of_*.py"))


@dataclass(frozen=True)
class Fleet:
    """The fleet's tasks: task id = demo-source data set = ``<base>_<i>``, topic ``<base>.<i>`` (deleted with the
    data set ``<base>`` when the benchmark ends), DAG ``crawl_<base>_<i>``."""

    base: str
    size: int

    @property
    def names(self) -> list[str]:
        return [f"{self.base}_{i:03d}" for i in range(self.size)]

    @property
    def dag_prefix(self) -> str:
        return f"crawl_{self.base}_"

    def topic(self, name: str) -> str:
        return f"{self.base}.{name.rsplit('_', 1)[1]}"

    def dag_id(self, name: str) -> str:
        return f"crawl_{name}"


def make_fleet(admin: SourceAdmin, tasks: int, records: int, batch: int) -> Fleet:
    """``tasks`` fresh data sets of ``records`` records each, all dated within the 7 days before a reference a
    minute ago (so every one is in the crawl window of the first runs)."""
    fleet = Fleet(dataset_name(), tasks)
    ref = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    for name in fleet.names:
        admin.create(name, records, 1.0, batch, ref=ref)
    return fleet


@dataclass(frozen=True)
class Schedule:
    """What starts the fleet's runs: a cron (UTC), a watch of the source's total every ``watch_every_s`` seconds (an
    announced total not yet planned is announced again after ``max(600, 4 x every_s)``), or both (the cron then a
    safety net beside the watch). Neither: the schedule is off, the DAGs get no new runs."""

    cron: str | None
    watch_every_s: float | None = None

    @property
    def watch(self) -> dict[str, float] | None:
        every = self.watch_every_s
        return None if every is None else {"every_s": every, "refire_s": max(600.0, 4 * every)}

    def describe(self) -> str:
        cron = f"`{self.cron}`" if self.cron else None
        if self.watch_every_s is None:
            return cron or "no schedule"
        watched = f"a watch every {self.watch_every_s:g} s"
        return f"{watched} (cron {cron} as the safety net)" if cron else f"{watched} alone (no cron)"


OFF = Schedule(None)


def task_entry(fleet: Fleet, name: str, schedule: Schedule) -> dict[str, Any]:
    """One crawl task with the defaults of a task on the default demo source connection (its pool, rate limit and
    in-flight bound are what is measured), created paused so that the whole fleet is unpaused at once."""
    entry: dict[str, Any] = {
        "id": name,
        "kafka": {"topic": fleet.topic(name)},
        "schedule": schedule.cron,
        "schedule_timezone": ZONE,
        "paused": True,
    }
    if schedule.watch is not None:
        entry["watch"] = schedule.watch
    return entry


def write_config(path: Path, fleet: Fleet, schedule: Schedule) -> None:
    """The fleet's config at ``path``, replaced in one rename (a parse never reads half a file); :data:`OFF`: no
    schedule and no watch, the DAGs keep their runs but get no new ones. The crawl DAG files are touched
    (:func:`touch_dag_files`)."""
    document = {"tasks": [task_entry(fleet, name, schedule) for name in fleet.names]}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(yaml.safe_dump(document, sort_keys=False))
    partial.replace(path)
    touch_dag_files()


def touch_dag_files() -> None:
    """The crawl DAG files touched, so the dag-processor parses them again at its next refresh rather than after
    ``min_file_process_interval``."""
    for shard in SHARD_FILES:
        os.utime(shard)


@dataclass(frozen=True)
class Append:
    """One append: when its request was sent (epoch), to which data set, how many records, the total it made."""

    at: float
    task: str
    records: int
    total: int


@dataclass
class Appends:
    """What the appender did, in order."""

    done: list[Append] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(a.records for a in self.done)


class Appender(threading.Thread):
    """Every ``every_s`` seconds until ``until`` (epoch), append 5-20 new records (dated after the data set's
    reference) to ``round(share x N)`` data sets drawn at random (seeded)."""

    def __init__(self, admin: SourceAdmin, fleet: Fleet, share: float, every_s: float, until: float, seed: int) -> None:
        super().__init__(name="fleet-appender", daemon=True)
        self.admin, self.fleet, self.share, self.every_s, self.until = admin, fleet, share, every_s, until
        self.rng = random.Random(seed)
        self.appends = Appends()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            count = round(self.share * self.fleet.size)
            next_at = time.time() + self.every_s
            while not self.stop.wait(max(0.0, next_at - time.time())) and next_at < self.until:
                for name in self.rng.sample(self.fleet.names, count):
                    n, sent = self.rng.randint(5, 20), time.time()
                    self.appends.done.append(Append(sent, name, n, self.admin.append(name, n)))
                next_at += self.every_s
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
