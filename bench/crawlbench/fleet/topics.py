"""Each task's topic against the source's ground truth, as far as the task has crawled, exactly.

The rule, per task, from its run records in ``crawler_ops.crawl_run``: let ``T`` be the source total its last
successful run counted (``total`` of the latest record with status ``success``, in the order they finished; 0 when
none succeeded), and ``tail`` the records at offsets ``T ..`` the current total, read from the source's pages: the
records appended after that run counted, which no successful run has promised yet. The topic must hold exactly
``expected``, where

- a task that started from empty (its first record, in the order they started, is a crawl):

      expected = (truth at the first successful run's ref_time  ∪  truth at the last one's)  −  tail

  with the truth the demo source's ``/admin/tasks/{task}/truth`` for the 7-day window (+24 h) ending at that
  reference time. A successful run has published every record of the window below its total; the union of two
  truths is the union over every run: the window's start only moves forward, and every appended record lies within
  the 24 h tolerance of every reference.
- a task that started caught up (its first record is an import, mode ``import``: ``crawler-ops import-progress``
  set its watermark ``W0``, recorded as that record's ``new_watermark``, and its progress total, as a successful
  run whose ``total`` is the one imported):

      expected = the records at offsets W0 .. T − 1, read from the source's pages

  nothing below ``W0`` (the old service published it, not this topic) and every record a crawl after the import
  counted (each is an appended one, inside every run's window). The import itself counts as a successful run, so a
  task never crawled after it has ``T = W0``: nothing expected, its topic empty. A topic that was never created
  (nothing published to it) is read as empty.

Then

- missing: expected keys not in the topic;
- extra: keys in the topic neither expected nor in the tail (for a caught-up task, also any record below ``W0``);
- ahead: tail keys already in the topic (published by a run that had not finished, or had failed, when read);
- duplicates: messages beyond the first of a key.

This needs no final run after the fleet stopped: the records appended near the end are in the tail until a run
succeeded after them, and are then expected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import httpx
import psycopg

from crawlbench.common import SOURCE_MAX_LIMIT, BenchError
from crawlbench.fleet.fleet import Fleet
from crawlbench.fleet.watch import IMPORTED
from crawlbench.source import SourceAdmin, get_page
from crawlbench.topics import topic_keys

READERS = 4
SUCCESS = "success"


@dataclass
class TopicCheck:
    """One task's topic (or the fleet's, summed) against its expected keys. ``no_success``: tasks with no successful
    crawl (an import is not one); ``imported``: tasks that started caught up (their first record an import)."""

    tasks: int = 1
    expected: int = 0
    received: int = 0
    missing: int = 0
    extra: int = 0
    ahead: int = 0
    duplicates: int = 0
    tail: int = 0
    no_success: int = 0
    imported: int = 0

    @property
    def exact(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.duplicates == 0

    def add(self, other: TopicCheck) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def short(self) -> str:
        verdict = "exact" if self.exact else "**NOT exact**"
        started = f"; {self.imported} of {self.tasks} started caught up" if self.imported else ""
        return (
            f"{verdict}: {self.expected:,} expected, missing {self.missing}, extra {self.extra}, dup {self.duplicates}"
            f"; tail {self.tail:,} not yet due ({self.ahead} of them already published){started}"
        )


@dataclass(frozen=True)
class RunRecord:
    """One record of a task in ``crawler_ops.crawl_run``: its mode (``import`` for an import), status, the total it
    counted (an import's: the total imported), the watermark it left (an import's: the one imported), its reference
    time and when it started and finished (epoch s; a record not finished has ``finished`` None)."""

    mode: str
    status: str
    total: int | None
    watermark: int | None
    ref: datetime
    started: float
    finished: float | None


@dataclass(frozen=True)
class Crawled:
    """How far a task has crawled, by the module's rule: ``T`` (``total``), the reference times whose truths are
    expected (``refs``, a task that started from empty), ``W0`` (``imported``: the watermark its first record
    imported; None: it started from empty) and whether any crawl succeeded (an import is not a crawl)."""

    total: int
    refs: tuple[datetime, ...]
    imported: int | None
    crawled: bool


def crawled_from(records: Sequence[RunRecord]) -> Crawled:
    """The module's rule read from a task's run records, in any order."""
    successes = sorted((r for r in records if r.status == SUCCESS), key=lambda r: r.finished or 0.0)
    last = successes[-1].total or 0 if successes else 0
    crawls = [r for r in successes if r.mode != IMPORTED]
    first = min(records, key=lambda r: r.started, default=None)
    if first is not None and first.mode == IMPORTED:
        return Crawled(last, (), first.watermark if first.watermark is not None else first.total or 0, bool(crawls))
    refs = (successes[0].ref, successes[-1].ref) if successes else ()
    return Crawled(last, refs, None, bool(crawls))


IdsAt = Callable[[int, int], set[str]]  # the ids of the records at offsets [start, end)
TruthAt = Callable[[datetime], frozenset[str]]  # the ids the truth holds at a reference time


def expected_and_tail(crawled: Crawled, current: int, ids_at: IdsAt, truth_at: TruthAt) -> tuple[set[str], set[str]]:
    """The task's expected keys and its tail (module rule), given how far it crawled, the source's ``current``
    total, the ids at offsets ``[start, end)`` (``ids_at``) and the truth at a reference time (``truth_at``)."""
    tail = ids_at(crawled.total, current)
    if crawled.imported is not None:
        return ids_at(crawled.imported, crawled.total), tail
    truth: set[str] = set()
    for ref in dict.fromkeys(crawled.refs):
        truth |= truth_at(ref)
    return truth - tail, tail


def compare(expected: set[str], tail: set[str], keys: Counter[str], crawled: Crawled) -> TopicCheck:
    """A topic's keys (with multiplicity) against its expected keys and tail."""
    found = set(keys)
    return TopicCheck(
        expected=len(expected),
        received=sum(keys.values()),
        missing=len(expected - found),
        extra=len(found - expected - tail),
        ahead=len(found & tail),
        duplicates=sum(n - 1 for n in keys.values() if n > 1),
        tail=len(tail),
        no_success=0 if crawled.crawled else 1,
        imported=0 if crawled.imported is None else 1,
    )


def run_records(pg_uri: str, task: str) -> list[RunRecord]:
    """Every record of the task in ``crawler_ops.crawl_run``, imports included."""
    with psycopg.connect(pg_uri) as conn:
        rows = conn.execute(
            "SELECT mode, status, total, new_watermark, ref_time, extract(epoch FROM started_at)::float8, "
            "extract(epoch FROM finished_at)::float8 FROM crawler_ops.crawl_run WHERE task_id = %s",
            (task,),
        ).fetchall()
    return [
        RunRecord(mode, status, None if total is None else int(total), None if mark is None else int(mark), ref, s, f)
        for mode, status, total, mark, ref, s, f in rows
    ]


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
    crawled = crawled_from(run_records(pg_uri, name))
    expected, tail = expected_and_tail(
        crawled,
        source_total(source, name),
        lambda start, end: tail_ids(source, name, start, end),
        lambda ref: admin.truth(name, ref),
    )
    return compare(expected, tail, received_keys(bootstrap, fleet.topic(name)), crawled)


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
