"""Each task's topic against the source's ground truth, as far as the task has crawled, exactly.

The rule, per task: let ``T`` be the source total its last successful run counted (``crawler_ops.crawl_run.total``
of the latest run with status ``success``; 0 when none succeeded). A successful run has published every record of
the window below its total, so the topic must hold exactly

    expected = (truth at the first successful run's ref_time  ∪  truth at the last one's)  −  tail

where the truth is the demo source's ``/admin/tasks/{task}/truth`` for the 7-day window (+24 h) ending at that
reference time, and ``tail`` is the records at offsets ``T ..`` the current total, read from the source's pages: the
records appended after that run counted, which no successful run has promised yet. The union of two truths is the
union over every run: the window's start only moves forward, and every appended record lies within the 24 h
tolerance of every reference. Then

- missing: expected keys not in the topic;
- extra: keys in the topic neither expected nor in the tail;
- ahead: tail keys already in the topic (published by a run that had not finished, or had failed, when read);
- duplicates: messages beyond the first of a key.

This needs no final run after the fleet stopped: the records appended near the end are in the tail until a run
succeeded after them, and are then expected.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import httpx
import psycopg

from crawlbench.common import SOURCE_MAX_LIMIT, BenchError
from crawlbench.fleet.fleet import Fleet
from crawlbench.source import SourceAdmin, get_page
from crawlbench.topics import topic_keys

READERS = 4


@dataclass
class TopicCheck:
    """One task's topic (or the fleet's, summed) against its expected keys."""

    tasks: int = 1
    expected: int = 0
    received: int = 0
    missing: int = 0
    extra: int = 0
    ahead: int = 0
    duplicates: int = 0
    tail: int = 0
    no_success: int = 0

    @property
    def exact(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.duplicates == 0

    def add(self, other: TopicCheck) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def short(self) -> str:
        verdict = "exact" if self.exact else "**NOT exact**"
        return (
            f"{verdict}: {self.expected:,} expected, missing {self.missing}, extra {self.extra}, dup {self.duplicates}"
            f"; tail {self.tail:,} not yet due ({self.ahead} of them already published)"
        )


def successful_runs(pg_uri: str, task: str) -> list[tuple[int, datetime]]:
    """(total, ref_time) of the task's successful runs, in the order they finished."""
    with psycopg.connect(pg_uri) as conn:
        rows = conn.execute(
            "SELECT total, ref_time FROM crawler_ops.crawl_run WHERE task_id = %s AND status = 'success' "
            "ORDER BY finished_at",
            (task,),
        ).fetchall()
    return [(int(total or 0), ref) for total, ref in rows]


def tail_ids(source: httpx.Client, name: str, start: int, total: int) -> set[str]:
    """The ids of the records at offsets ``start .. total - 1``."""
    ids: set[str] = set()
    for offset in range(start, total, SOURCE_MAX_LIMIT):
        records, _ = get_page(source, name, offset, min(SOURCE_MAX_LIMIT, total - offset))
        ids.update(str(r["id"]) for r in records)
    return ids


def source_total(source: httpx.Client, name: str) -> int:
    return int(source.get(f"/api/{name}/count").json()["data"]["total"])


def received_keys(bootstrap: str, topic: str) -> Counter[str]:
    """Every key in the topic; none when the topic was never created (nothing published)."""
    try:
        return topic_keys(bootstrap, topic)
    except BenchError as exc:
        if "does not exist" in str(exc):
            return Counter()
        raise


def check_task(
    admin: SourceAdmin, source: httpx.Client, bootstrap: str, pg_uri: str, fleet: Fleet, name: str
) -> TopicCheck:
    """One task's topic by the module's rule."""
    runs = successful_runs(pg_uri, name)
    crawled = runs[-1][0] if runs else 0
    tail = tail_ids(source, name, crawled, source_total(source, name))
    truth = admin.truth(name, runs[0][1]) | admin.truth(name, runs[-1][1]) if runs else frozenset()
    expected = set(truth) - tail
    keys = received_keys(bootstrap, fleet.topic(name))
    found = set(keys)
    return TopicCheck(
        expected=len(expected),
        received=sum(keys.values()),
        missing=len(expected - found),
        extra=len(found - expected - tail),
        ahead=len(found & tail),
        duplicates=sum(n - 1 for n in keys.values() if n > 1),
        tail=len(tail),
        no_success=0 if runs else 1,
    )


def check_fleet(source_url: str, bootstrap: str, pg_uri: str, fleet: Fleet) -> tuple[TopicCheck, dict[str, Any]]:
    """Every task's topic (read :data:`READERS` at a time), summed; and the tasks that are not exact."""

    def one(name: str) -> TopicCheck:
        with httpx.Client(base_url=source_url, timeout=120) as source:
            return check_task(SourceAdmin(source_url), source, bootstrap, pg_uri, fleet, name)

    with ThreadPoolExecutor(READERS) as pool:
        checks = dict(zip(fleet.names, pool.map(one, fleet.names), strict=True))
    total = TopicCheck(tasks=0)
    for check in checks.values():
        total.add(check)
    return total, {name: asdict(check) for name, check in checks.items() if not check.exact}
