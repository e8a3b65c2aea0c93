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


def task_entry(fleet: Fleet, name: str, cron: str | None) -> dict[str, Any]:
    """One crawl task with the defaults of a task on the default demo source connection (its pool, rate limit and
    in-flight bound are what is measured), created paused so that the whole fleet is unpaused at once."""
    return {
        "id": name,
        "kafka": {"topic": fleet.topic(name)},
        "schedule": cron,
        "schedule_timezone": ZONE,
        "paused": True,
    }


def write_config(path: Path, fleet: Fleet, cron: str | None) -> None:
    """The fleet's config at ``path``, replaced in one rename (a parse never reads half a file); ``cron`` None: no
    schedule, the DAGs keep their runs but get no new ones. The crawl DAG files are touched, so the dag-processor
    parses them again at its next refresh rather than after ``min_file_process_interval``."""
    document = {"tasks": [task_entry(fleet, name, cron) for name in fleet.names]}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(yaml.safe_dump(document, sort_keys=False))
    partial.replace(path)
    for shard in SHARD_FILES:
        os.utime(shard)


@dataclass
class Appends:
    """What the appender did: (epoch, data set, records) per append."""

    done: list[tuple[float, str, int]] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(n for _, _, n in self.done)


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
                    n = self.rng.randint(5, 20)
                    self.admin.append(name, n)
                    self.appends.done.append((time.time(), name, n))
                next_at += self.every_s
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
