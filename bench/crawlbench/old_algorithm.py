"""The old service's first crawl, reimplemented from its behaviour (seeds/000), measured on a fresh topic."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from crawlbench.common import MAX_EXPIRED_BATCHES, REF, TOLERANCE_S, WINDOW_DAYS
from crawlbench.environment import Stack
from crawlbench.results import Variant
from crawlbench.source import Dataset, SourceAdmin, get_page
from crawlbench.topics import CountingProducer, check_topic, warm_producer

OLD_SLEEP_S = 0.5
SHANGHAI = ZoneInfo("Asia/Shanghai")
# What the old service's JobData.from_raw kept of a raw record (plus the task id).
OLD_FIELDS = ("id", "title", "company", "city", "salary", "education", "description", "aae397", "Collect_time")


def old_record_date(record: dict[str, Any]) -> datetime | None:
    """The old filter's date: ``aae397``, else ``Collect_time``; naive values are Asia/Shanghai."""
    for name in ("aae397", "Collect_time"):
        value = record.get(name)
        if not isinstance(value, str) or not value.strip():
            continue
        try:
            moment = datetime.fromisoformat(value.strip().replace("/", "-"))
        except ValueError:
            continue
        return moment if moment.tzinfo else moment.replace(tzinfo=SHANGHAI)
    return None


@dataclass
class OldCounts:
    pages: int = 0
    fetched: int = 0
    kept: int = 0
    published: int = 0
    sleeps: int = 0


class OldCrawler:
    """The old service's first crawl: newest page first, ``offset = total - batch`` and down by ``batch``
    while ``offset >= 0``, each page filtered, its kept records produced and flushed before the next fetch,
    a fixed sleep after each page, and a stop after ``max_expired_batches`` consecutive pages without a kept
    record.

    The window is anchored on :data:`REF` instead of the old wall clock, with the project's 24 h future
    tolerance, so both keep the same records. The old loop retried a failed page every 5 s forever;
    here a failure ends the variant with an error.
    """

    def __init__(self, ds: Dataset, sleep_s: float, topic: str, producer: CountingProducer) -> None:
        self.producer = producer
        self.ds = ds
        self.sleep_s = sleep_s
        self.topic = topic
        self.counts = OldCounts()
        self.start = REF - timedelta(days=WINDOW_DAYS)
        self.end = REF + timedelta(seconds=TOLERANCE_S)

    def run(self, client: httpx.Client) -> OldCounts:
        total = int(client.get(f"/api/{self.ds.name}/count").json()["data"]["total"])
        offset = max(0, total - self.ds.batch)
        end_offset = 0  # first crawl: no saved last_start_offset
        if offset <= end_offset:
            return self.counts  # the old service saw "no new data" when total <= batch
        streak = 0
        while offset >= end_offset:
            kept = self.crawl_page(client, offset)
            streak = 0 if kept else streak + 1
            if streak >= MAX_EXPIRED_BATCHES:
                break
            offset -= self.ds.batch
            if self.sleep_s:
                time.sleep(self.sleep_s)
                self.counts.sleeps += 1
        return self.counts

    def crawl_page(self, client: httpx.Client, offset: int) -> int:
        """Fetch one page, filter it, produce the kept records and flush; return how many were kept."""
        records, _ = get_page(client, self.ds.name, offset, self.ds.batch)
        self.counts.pages += 1
        self.counts.fetched += len(records)
        jobs = [
            {**{name: raw.get(name) for name in OLD_FIELDS}, "task_id": self.ds.name}
            for raw in records
            if (moment := old_record_date(raw)) is not None and self.start <= moment <= self.end
        ]
        before = self.producer.delivered
        for job in jobs:
            self.producer.produce(self.topic, str(job["id"]).encode(), json.dumps(job, ensure_ascii=False).encode())
        if jobs:
            self.producer.flush(f"old algorithm, page at {offset}")
        self.counts.kept += len(jobs)
        self.counts.published += self.producer.delivered - before
        return len(jobs)


def measure_old(stack: Stack, admin: SourceAdmin, ds: Dataset, sleep_s: float, scratch: str) -> Variant:
    """Run the old algorithm on a fresh topic and check what it published (its producer is long-lived in
    the old service, so it is connected before timing)."""
    topic = f"{ds.name}.old{'-sleep' if sleep_s else ''}"
    producer = warm_producer(stack, scratch, topic)
    admin.clear_requests(ds.name)
    cpu = time.process_time()
    started = time.perf_counter()
    with httpx.Client(base_url=stack.source_url, timeout=60.0) as client:
        counts = OldCrawler(ds, sleep_s, topic, producer).run(client)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    return Variant(
        name=f"old algorithm ({f'{sleep_s:g} s sleep' if sleep_s else 'no sleep'})",
        wall_s=seconds,
        pages=counts.pages,
        fetched=counts.fetched,
        kept=counts.kept,
        published=counts.published,
        rate=counts.fetched / seconds,
        requests=admin.requests(ds.name),
        keys=check_topic(stack.bootstrap, topic, ds.in_window_ids),
        cpu_s=cpu,
        details={"topic": topic, "sleeps": counts.sleeps, "sleep_s": sleep_s},
    )
