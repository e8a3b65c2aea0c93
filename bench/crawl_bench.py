"""End-to-end crawl benchmark against the running local stack, all variants in one run, reported as ratios.

Variants (SPEC.md §6), on one fresh demo-source data set ``bench_<random>``:

* **source drain**: one sequential httpx client fetches and decodes every page, discards it (source limit);
* **sink limit**: the in-window records (fetched untimed) produced to a fresh topic by an idempotent
  producer (``acks=all``), one flush at the end (sink limit);
* **old algorithm**: the old service's loop, reimplemented: one page at a time from ``total - batch``
  down, filter, produce and flush per page, first-crawl stop after 5 consecutive pages with nothing in the
  window; without and with its 0.5 s sleep per page;
* **this project**: ``airflow dags test crawl_<id> <ref>`` as a subprocess on a one-task config; wall time,
  crawl span from ``crawler_ops.crawl_run``, Airflow overhead, peak RSS, per-task timings from its log,
  and the topic's keys checked against the source's ground truth;
* with ``--scheduler``, also the DAG on a real scheduler + LocalExecutor (own api-server, scheduler and
  dag-processor on a private copy of the metadata DB), triggered with ``airflow dags trigger``.

Examples::

    .venv/bin/python bench/crawl_bench.py                              # 200 000 records, batch 1000
    .venv/bin/python bench/crawl_bench.py --total 20000
    .venv/bin/python bench/crawl_bench.py --totals 10000,100000,1000000 --skip-old-sleep
    .venv/bin/python bench/crawl_bench.py --total 200000 --skip-old-sleep --scheduler

The stack must be up (``.venv/bin/python dev/stack.py up``); its environment is read from
``.stack/stack.json``. Topics and data sets are unique per run and never deleted. Results: markdown on
stdout, JSON in ``bench/results/<timestamp>.json``, each ``dags test`` log in ``bench/results/<timestamp>/``.
Exit status 1 when a correctness check fails, 2 when the stack is not usable.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import os
import re
import secrets
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import msgspec
import psutil
import psycopg
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
STACK_DIR = Path(os.environ.get("CRAWLER_OPS_STACK_DIR") or REPO / ".stack")
RESULTS_DIR = REPO / "bench" / "results"
REF = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW_DAYS = 7.0
TOLERANCE_S = 86_400
MAX_EXPIRED_BATCHES = 5
PARTITIONS = 3
OLD_SLEEP_S = 0.5
SOURCE_MAX_LIMIT = 1000
SHANGHAI = ZoneInfo("Asia/Shanghai")
# The producer settings of crawler_ops.hooks.producer (DEFAULT_SETTINGS + REQUIRED_SETTINGS), repeated here
# so that the bench process does not import Airflow; every producer in this benchmark uses them.
PRODUCER_SETTINGS: dict[str, Any] = {
    "linger.ms": 5,
    "compression.type": "lz4",
    "message.timeout.ms": 60_000,
    "enable.idempotence": True,
    "acks": "all",
}
# What the old service's JobData.from_raw kept of a raw record (plus the task id).
OLD_FIELDS = ("id", "title", "company", "city", "salary", "education", "description", "aae397", "Collect_time")


Headers = list[tuple[str, str | bytes | None]]


class BenchError(Exception):
    """A problem that stops the benchmark with a clear message (stack down, bad option, failed run)."""


# --------------------------------------------------------------------------- options


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=200_000, help="records in the data set (default 200000)")
    parser.add_argument("--totals", default=None, help="comma-separated totals to compare, e.g. 10000,100000,1000000")
    parser.add_argument("--batch-size", type=int, default=1000, help="records per page, 1..1000 (default 1000)")
    parser.add_argument("--share", type=float, default=0.3, help="in_window_share of the data set (default 0.3)")
    parser.add_argument("--skip-old-sleep", action="store_true", help="skip the old algorithm with its 0.5 s sleep")
    parser.add_argument("--drain-passes", type=int, default=2, help="drain passes; the best counts (default 2)")
    parser.add_argument("--concurrency", type=int, default=None, help="project source.concurrency (default: its own)")
    parser.add_argument("--min-batches-per-chunk", type=int, default=None, help="project min_batches_per_chunk")
    parser.add_argument("--max-chunks", type=int, default=None, help="project max_chunks")
    parser.add_argument(
        "--shared-airflow-db",
        action="store_true",
        help="run dags test on the stack's own SQLite metadata DB instead of a private copy of it",
    )
    parser.add_argument("--scheduler", action="store_true", help="also run the DAG under a real scheduler (optional)")
    args = parser.parse_args(argv)
    if not 1 <= args.batch_size <= SOURCE_MAX_LIMIT:
        parser.error(f"--batch-size must be within [1, {SOURCE_MAX_LIMIT}] (the demo source's page limit)")
    if not 0.0 < args.share <= 1.0:
        parser.error("--share must be within (0, 1]")
    args.total_list = parse_totals(parser, args.totals) if args.totals else [args.total]
    if any(t < args.batch_size for t in args.total_list):
        parser.error("every total must be at least --batch-size")
    return args


def parse_totals(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """``10000,100000`` -> ``[10000, 100000]``; exits with a usage error otherwise."""
    try:
        totals = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--totals takes comma-separated integers, got {text!r}")
    if not totals or min(totals) < 1:
        parser.error("--totals needs positive integers")
    return totals


# --------------------------------------------------------------------------- the stack


@dataclass(frozen=True)
class Stack:
    """The running local stack: its environment and the endpoints the benchmark talks to."""

    env: dict[str, str]
    source_url: str
    bootstrap: str
    pg_uri: str


def load_stack() -> Stack:
    """Read ``.stack/stack.json`` and check that the source, Kafka and PostgreSQL answer."""
    state = STACK_DIR / "stack.json"
    hint = "start it with `.venv/bin/python dev/stack.py up`"
    try:
        env = json.loads(state.read_text())["env"]
        stack = Stack(env, env["CRAWLER_OPS_SOURCE_URL"], env["CRAWLER_OPS_KAFKA_BOOTSTRAP"], env["CRAWLER_OPS_PG_URI"])
    except (OSError, ValueError, KeyError) as exc:
        raise BenchError(f"no usable stack state in {state} ({exc!r}); {hint}") from exc
    check_source(stack.source_url, hint)
    check_kafka(stack.bootstrap, hint)
    check_postgres(stack.pg_uri, hint)
    return stack


def check_source(url: str, hint: str) -> None:
    """The demo source answers ``/healthz``."""
    try:
        httpx.get(f"{url}/healthz", timeout=3.0).raise_for_status()
    except httpx.HTTPError as exc:
        raise BenchError(f"the demo source at {url} does not answer ({exc!r}); {hint}") from exc


def check_kafka(bootstrap: str, hint: str) -> None:
    """Kafka answers a metadata request within 5 s."""
    try:
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=5)
    except KafkaException as exc:
        raise BenchError(f"Kafka at {bootstrap} does not answer ({exc}); {hint}") from exc


def check_postgres(uri: str, hint: str) -> None:
    """PostgreSQL accepts a connection within 5 s."""
    try:
        with psycopg.connect(uri, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise BenchError(f"PostgreSQL at {uri} does not answer ({exc}); {hint}") from exc


# --------------------------------------------------------------------------- the demo source


@dataclass(frozen=True)
class Dataset:
    """One demo-source data set and its ground truth for the benchmark's window."""

    name: str
    total: int
    share: float
    batch: int
    in_window_ids: frozenset[str]

    @property
    def in_window(self) -> int:
        return len(self.in_window_ids)

    @property
    def expected_first_crawl_pages(self) -> int:
        """Pages in the window plus the early-stop allowance: ``ceil(in_window / batch) + 5``."""
        return math.ceil(self.in_window / self.batch) + MAX_EXPIRED_BATCHES


@dataclass(frozen=True)
class RequestLog:
    """List requests the source saw for a data set since the last clear."""

    pages: int
    probes: int
    errors: int
    dropped: int


class SourceAdmin:
    """Admin client of the demo source: create data sets, ground truth, request log."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=300.0)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.status_code != httpx.codes.OK:
            raise BenchError(f"demo source: {method} {path} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def create(self, name: str, total: int, share: float, batch: int, ref: datetime = REF) -> Dataset:
        """(Re)create ``name`` around ``ref`` and read its truth for the 7-day window (+24 h)."""
        body = {"total": total, "in_window_share": share, "ref": ref.isoformat(), "window_days": int(WINDOW_DAYS)}
        self._json("PUT", f"/admin/tasks/{name}", json=body)
        return Dataset(name, total, share, batch, self.truth(name, ref))

    def truth(self, name: str, ref: datetime) -> frozenset[str]:
        """Ids of the records whose true date lies in ``[ref - 7 d, ref + 24 h]``."""
        truth = self._json(
            "GET",
            f"/admin/tasks/{name}/truth",
            params={"ref": ref.isoformat(), "days": WINDOW_DAYS, "tolerance_s": TOLERANCE_S},
        )
        return frozenset(truth["in_window_ids"])

    def clear_requests(self, name: str) -> None:
        self._json("DELETE", f"/admin/tasks/{name}/requests")

    def requests(self, name: str) -> RequestLog:
        """Page requests (limit > 1), one-record probes, non-200 answers since the last clear."""
        log = self._json("GET", f"/admin/tasks/{name}/requests")
        entries = log["requests"]
        return RequestLog(
            pages=sum(1 for r in entries if r["limit"] != 1 and r["status"] == httpx.codes.OK),
            probes=sum(1 for r in entries if r["limit"] == 1),
            errors=sum(1 for r in entries if r["status"] != httpx.codes.OK),
            dropped=int(log.get("dropped", 0)),
        )


def get_page(client: httpx.Client, name: str, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """One page of records and its body size; raises BenchError on a non-200 answer."""
    response = client.get(f"/api/{name}/list", params={"offset": offset, "limit": limit})
    if response.status_code != httpx.codes.OK:
        raise BenchError(f"GET /api/{name}/list offset={offset}: HTTP {response.status_code}")
    return msgspec.json.decode(response.content)["data"]["data"], len(response.content)


# --------------------------------------------------------------------------- results


@dataclass
class KeyCheck:
    """The keys found in a topic against the ground truth's in-window ids."""

    expected: int
    received: int
    distinct: int
    missing: int
    extra: int
    duplicates: int
    sample_missing: list[str] = field(default_factory=list)
    sample_extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0

    def short(self) -> str:
        if self.ok:
            return f"yes ({self.distinct}, dup {self.duplicates})"
        return f"**NO**: missing {self.missing}, extra {self.extra}, dup {self.duplicates}"


@dataclass
class Variant:
    """One measured variant: the numbers of the main table plus details for the JSON."""

    name: str
    wall_s: float
    pages: int | None
    fetched: int
    kept: int
    published: int
    rate: float
    rate_basis: str = "fetched"
    requests: RequestLog | None = None
    keys: KeyCheck | None = None
    cpu_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Suite:
    """Everything measured for one total."""

    dataset: dict[str, Any]
    variants: list[Variant]
    project: dict[str, Any]
    components: dict[str, float]
    problems: list[str]
    scheduler: dict[str, Any] = field(default_factory=dict)

    def variant(self, prefix: str) -> Variant | None:
        return next((v for v in self.variants if v.name.startswith(prefix)), None)


# --------------------------------------------------------------------------- Kafka helpers


def create_topic(bootstrap: str, topic: str) -> None:
    """Create a fresh topic with :data:`PARTITIONS` partitions (untimed)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        raise BenchError(f"cannot create Kafka topic {topic}: {exc}") from exc
    wait_for_leaders(admin, topic)


def wait_for_leaders(admin: AdminClient, topic: str, timeout: float = 30.0) -> None:
    """Wait until every partition of a new topic has a leader, so the first produce does not wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        info = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            info is not None
            and info.error is None
            and len(info.partitions) == PARTITIONS
            and all(p.leader >= 0 and p.error is None for p in info.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"Kafka topic {topic} has no leader for every partition after {timeout:.0f}s")
        time.sleep(0.1)


class CountingProducer:
    """An idempotent producer with the project's settings that counts delivery reports."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "log_level": 4, **PRODUCER_SETTINGS})
        self.delivered = 0
        self.failures: list[str] = []

    def warm_up(self, scratch_topic: str, target_topic: str) -> None:
        """Connect, get the idempotent producer id (one message to a scratch topic) and the target's
        metadata before anything is timed, as a long-lived producer would have them."""
        self.produce(scratch_topic, b"warm-up", b"{}")
        self.flush("warm-up")
        self.delivered = 0
        self.producer.list_topics(target_topic, timeout=10)

    def _report(self, err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failures.append(str(err))

    def produce(self, topic: str, key: bytes, value: bytes, headers: Headers | None = None) -> None:
        """Produce one message; delivery reports are served when the local queue is full and by flush."""
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=self._report)
                return
            except BufferError:
                self.producer.poll(0.1)

    def flush(self, what: str) -> None:
        """Wait for every delivery report; raise BenchError when one failed."""
        remaining = self.producer.flush(120)
        if remaining or self.failures:
            raise BenchError(f"{what}: {remaining} messages unconfirmed, failures: {self.failures[:3]}")


def topic_keys(bootstrap: str, topic: str, timeout: float = 30.0) -> Counter[str]:
    """Every key in ``topic`` from the beginning to each partition's current end, with multiplicity."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crawl-bench-{secrets.token_hex(4)}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    keys: Counter[str] = Counter()
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            raise BenchError(f"topic {topic} does not exist")
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in info.partitions
        }
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        deadline = time.monotonic() + timeout
        while pending:
            # consume() waits for the whole batch or the timeout: ask often, with a short timeout.
            batch = consumer.consume(10_000, 0.2)
            if not batch and time.monotonic() > deadline:
                raise BenchError(f"topic {topic}: no message within {timeout}s, partitions {sorted(pending)} unread")
            if batch:
                deadline = time.monotonic() + timeout
            for msg in batch:
                if msg.error():
                    raise BenchError(f"topic {topic}: {msg.error()}")
                keys[(msg.key() or b"").decode()] += 1
                if (msg.offset() or 0) + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
    finally:
        consumer.close()
    return keys


def check_keys(keys: Counter[str], truth: frozenset[str]) -> KeyCheck:
    """Compare a topic's keys with the truth's in-window ids."""
    found = set(keys)
    missing, extra = truth - found, found - truth
    return KeyCheck(
        expected=len(truth),
        received=sum(keys.values()),
        distinct=len(found),
        missing=len(missing),
        extra=len(extra),
        duplicates=sum(n - 1 for n in keys.values() if n > 1),
        sample_missing=sorted(missing)[:5],
        sample_extra=sorted(extra)[:5],
    )


# --------------------------------------------------------------------------- variant 1: source drain


def measure_drain(url: str, ds: Dataset, passes: int) -> Variant:
    """Fetch and decode every page sequentially with one keep-alive client; the best of ``passes`` counts."""
    runs: list[dict[str, float]] = []
    with httpx.Client(base_url=url, timeout=60.0) as client:
        for _ in range(max(1, passes)):
            records = pages = body_bytes = 0
            started = time.perf_counter()
            for offset in range(0, ds.total, ds.batch):
                page, size = get_page(client, ds.name, offset, ds.batch)
                records += len(page)
                body_bytes += size
                pages += 1
            seconds = time.perf_counter() - started
            if records != ds.total:
                raise BenchError(f"drain read {records} records, expected {ds.total}")
            runs.append(
                {"seconds": seconds, "records_per_s": records / seconds, "mb_per_s": body_bytes / seconds / 1e6}
            )
    best = min(runs, key=lambda r: r["seconds"])
    return Variant(
        name="source drain",
        wall_s=best["seconds"],
        pages=pages,
        fetched=ds.total,
        kept=0,
        published=0,
        rate=best["records_per_s"],
        details={"passes": runs, "mb_per_s": best["mb_per_s"], "bytes_per_record": body_bytes / ds.total},
    )


# --------------------------------------------------------------------------- variant 2: sink limit


@dataclass(frozen=True)
class RawPage:
    """One page as fetched: where it starts, its body, and how long the GET took."""

    offset: int
    body: bytes
    fetch_s: float


def fetch_window_pages(url: str, ds: Dataset) -> list[RawPage]:
    """The pages covering the in-window records (the newest ``in_window`` offsets), untimed for the table."""
    pages: list[RawPage] = []
    low = ds.total - ds.in_window
    with httpx.Client(base_url=url, timeout=60.0) as client:
        for offset in range(low, ds.total, ds.batch):
            started = time.perf_counter()
            response = client.get(f"/api/{ds.name}/list", params={"offset": offset, "limit": ds.batch})
            response.raise_for_status()
            pages.append(RawPage(offset, response.content, time.perf_counter() - started))
    return pages


def window_messages(ds: Dataset, pages: Sequence[RawPage]) -> list[tuple[bytes, bytes, Headers]]:
    """Key, value and headers (like the project's) of every in-window record of ``pages``."""
    encoder = msgspec.json.Encoder()
    messages: list[tuple[bytes, bytes, Headers]] = []
    for page in pages:
        for index, record in enumerate(msgspec.json.decode(page.body)["data"]["data"]):
            if record["id"] in ds.in_window_ids:
                headers: Headers = [
                    ("crawl_task", b"bench"),
                    ("run_id", b"sink"),
                    ("source_offset", b"%d" % (page.offset + index)),
                ]
                messages.append((record["id"].encode(), encoder.encode(record), headers))
    return messages


def measure_sink(stack: Stack, ds: Dataset, pages: Sequence[RawPage], scratch: str) -> Variant:
    """Produce the in-window records as fast as possible, one flush at the end."""
    messages = window_messages(ds, pages)
    topic = f"{ds.name}.sink"
    create_topic(stack.bootstrap, topic)
    producer = CountingProducer(stack.bootstrap)
    producer.warm_up(scratch, topic)
    started = time.perf_counter()
    for key, value, headers in messages:
        producer.produce(topic, key, value, headers)
    producer.flush("sink limit")
    seconds = time.perf_counter() - started
    keys = check_keys(topic_keys(stack.bootstrap, topic), ds.in_window_ids)
    return Variant(
        name="sink limit (1 flush)",
        wall_s=seconds,
        pages=None,
        fetched=0,
        kept=len(messages),
        published=producer.delivered,
        rate=producer.delivered / seconds,
        rate_basis="produced",
        keys=keys,
        details={"topic": topic, "value_bytes": sum(len(m[1]) for m in messages)},
    )


# --------------------------------------------------------------------------- variant 3: the old algorithm


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
    """The old service's first crawl, reimplemented from its behaviour (seeds/000): newest page first,
    ``offset = total - batch`` and down by ``batch`` while ``offset >= 0``, each page filtered, its kept
    records produced and flushed before the next fetch, a fixed sleep after each page, and a stop after
    ``max_expired_batches`` consecutive pages without a kept record.

    The window is anchored on :data:`REF` instead of the old wall clock, with the project's 24 h future
    tolerance, so both keep the same records. The old loop retried a failed page every 5 s forever;
    here a failure ends the variant with an error.
    """

    def __init__(self, stack: Stack, ds: Dataset, sleep_s: float, topic: str, producer: CountingProducer) -> None:
        self.stack = stack
        self.producer = producer
        self.ds = ds
        self.sleep_s = sleep_s
        self.topic = topic
        self.counts = OldCounts()
        self.start = REF - timedelta(days=WINDOW_DAYS)
        self.end = REF + timedelta(seconds=TOLERANCE_S)

    def run(self) -> OldCounts:
        producer = self.producer
        with httpx.Client(base_url=self.stack.source_url, timeout=60.0) as client:
            total = int(client.get(f"/api/{self.ds.name}/count").json()["data"]["total"])
            offset = max(0, total - self.ds.batch)
            end_offset = 0  # first crawl: no saved last_start_offset
            if offset <= end_offset:
                return self.counts  # the old service saw "no new data" when total <= batch
            streak = 0
            while offset >= end_offset:
                kept = self.crawl_page(client, producer, offset)
                streak = 0 if kept else streak + 1
                if streak >= MAX_EXPIRED_BATCHES:
                    break
                offset -= self.ds.batch
                if self.sleep_s:
                    time.sleep(self.sleep_s)
                    self.counts.sleeps += 1
        return self.counts

    def crawl_page(self, client: httpx.Client, producer: CountingProducer, offset: int) -> int:
        """Fetch one page, filter it, produce the kept records and flush; return how many were kept."""
        records, _ = get_page(client, self.ds.name, offset, self.ds.batch)
        self.counts.pages += 1
        self.counts.fetched += len(records)
        jobs = []
        for raw in records:
            moment = old_record_date(raw)
            if moment is not None and self.start <= moment <= self.end:
                jobs.append({**{name: raw.get(name) for name in OLD_FIELDS}, "task_id": self.ds.name})
        before = producer.delivered
        for job in jobs:
            producer.produce(self.topic, str(job["id"]).encode(), json.dumps(job, ensure_ascii=False).encode())
        if jobs:
            producer.flush(f"old algorithm, page at {offset}")
        self.counts.kept += len(jobs)
        self.counts.published += producer.delivered - before
        return len(jobs)


def measure_old(stack: Stack, admin: SourceAdmin, ds: Dataset, sleep_s: float, scratch: str) -> Variant:
    """Run the old algorithm on a fresh topic and check what it published (its producer is long-lived in
    the old service, so it is connected before timing)."""
    topic = f"{ds.name}.old{'-sleep' if sleep_s else ''}"
    create_topic(stack.bootstrap, topic)
    producer = CountingProducer(stack.bootstrap)
    producer.warm_up(scratch, topic)
    admin.clear_requests(ds.name)
    cpu = time.process_time()
    started = time.perf_counter()
    counts = OldCrawler(stack, ds, sleep_s, topic, producer).run()
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    return Variant(
        name=f"old algorithm ({'0.5 s sleep' if sleep_s else 'no sleep'})",
        wall_s=seconds,
        pages=counts.pages,
        fetched=counts.fetched,
        kept=counts.kept,
        published=counts.published,
        rate=counts.fetched / seconds,
        requests=admin.requests(ds.name),
        keys=check_keys(topic_keys(stack.bootstrap, topic), ds.in_window_ids),
        cpu_s=cpu,
        details={"topic": topic, "sleeps": counts.sleeps, "sleep_s": sleep_s},
    )


# --------------------------------------------------------------------------- per-page component costs


def measure_components(
    stack: Stack, ds: Dataset, pages: Sequence[RawPage], scratch: str, limit: int = 20
) -> dict[str, float]:
    """Milliseconds per page of ``batch`` records: GET, decode, the project's filter+encode, produce+flush.

    Uses the package's pure ``crawler_ops.records.build_messages`` (no Airflow import) on in-window pages.
    """
    if str(REPO / "plugins") not in sys.path:
        sys.path.insert(0, str(REPO / "plugins"))
    records_mod: Any = importlib.import_module("crawler_ops.records")
    filtering: Any = importlib.import_module("crawler_ops.filtering")
    rule = filtering.DateRule()
    window = filtering.Window.around(REF, WINDOW_DAYS, timedelta(seconds=TOLERANCE_S))
    sample = list(pages[:limit])
    topic = f"{ds.name}.components"
    create_topic(stack.bootstrap, topic)
    producer = CountingProducer(stack.bootstrap)
    producer.warm_up(scratch, topic)
    decode, build, publish = [], [], []
    for page in sample:
        started = time.perf_counter()
        records = msgspec.json.decode(page.body)["data"]["data"]
        decode.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = records_mod.build_messages(records, page.offset, rule, window, "id", [("crawl_task", b"bench")])
        build.append(time.perf_counter() - started)
        started = time.perf_counter()
        for message in result.messages:
            producer.produce(topic, message.key, message.value, list(message.headers))
        producer.flush("components")
        publish.append(time.perf_counter() - started)
    ms = 1000.0
    return {
        "pages_sampled": float(len(sample)),
        "records_per_page": float(ds.batch),
        "get_ms": statistics.median(p.fetch_s for p in sample) * ms,
        "decode_ms": statistics.median(decode) * ms,
        "filter_encode_ms": statistics.median(build) * ms,
        "produce_flush_ms": statistics.median(publish) * ms,
    }


# --------------------------------------------------------------------------- variant 4: this project


@dataclass
class ProcessStats:
    """How a monitored subprocess ran."""

    returncode: int
    wall_s: float
    started_epoch: float
    ended_epoch: float
    peak_tree_rss_mb: float
    wait4_maxrss_mb: float  # inflated: Linux counts the forked, pre-exec image of this (large) process
    cpu_s: float


def tree_rss(proc: psutil.Process) -> int:
    """Resident set size of a process and all its descendants, in bytes."""
    total = 0
    for member in [proc, *proc.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def run_monitored(command: Sequence[str], env: dict[str, str], log_path: Path) -> ProcessStats:
    """Run ``command`` with its output in ``log_path``, polling the RSS of its process tree every 20 ms.

    ``os.wait4`` gives the child's CPU time. Its ``ru_maxrss`` is kept for reference only: Linux keeps the
    high-water mark of the image replaced by ``exec``, i.e. the fork of this benchmark process.
    """
    with log_path.open("wb") as log:
        started_epoch, started = time.time(), time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    watched = psutil.Process(proc.pid)
    peak = 0
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError as exc:
            raise BenchError(f"lost track of {command[0]} (pid {proc.pid})") from exc
        if pid:
            break
        with suppress(psutil.NoSuchProcess):
            peak = max(peak, tree_rss(watched))
        time.sleep(0.02)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ProcessStats(
        returncode=proc.returncode,
        wall_s=wall,
        started_epoch=started_epoch,
        ended_epoch=started_epoch + wall,
        peak_tree_rss_mb=peak / 2**20,
        wait4_maxrss_mb=usage.ru_maxrss / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
    )


def airflow_command() -> list[str]:
    """The ``airflow`` CLI of this interpreter's environment."""
    script = Path(sys.executable).parent / "airflow"
    return [str(script)] if script.exists() else [sys.executable, "-m", "airflow"]


@contextmanager
def airflow_env(stack: Stack, shared: bool, quiesce: bool = False) -> Iterator[dict[str, str]]:
    """The environment for Airflow commands: the stack's, on a private copy of its metadata DB unless
    ``shared`` (so the benchmark never holds the SQLite lock other users of the stack need).

    With ``quiesce`` (for a real scheduler on the copy), every DAG already in the copy is paused and its
    queued or running runs are marked failed, so only the benchmark's own DAG can run.
    """
    env = {**os.environ, **stack.env}
    if shared:
        yield env
        return
    home = Path(tempfile.mkdtemp(prefix="crawl_bench_airflow_"))
    try:
        source_home = Path(stack.env["AIRFLOW_HOME"])
        shutil.copy2(source_home / "airflow.cfg", home / "airflow.cfg")
        with sqlite3.connect(source_home / "airflow.db") as src, sqlite3.connect(home / "airflow.db") as dst:
            src.backup(dst)
            if quiesce:
                dst.execute("UPDATE dag SET is_paused = 1")
                dst.execute("UPDATE dag_run SET state = 'failed' WHERE state IN ('queued', 'running')")
        (home / "logs").mkdir()
        env.update(
            AIRFLOW_HOME=str(home),
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
            AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(home / "logs"),
        )
        yield env
    except (OSError, sqlite3.Error) as exc:
        raise BenchError(f"cannot copy the Airflow metadata DB from {stack.env.get('AIRFLOW_HOME')}: {exc}") from exc
    finally:
        shutil.rmtree(home, ignore_errors=True)


def project_config(ds: Dataset, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    """A one-task crawler_ops config for the data set (schedule null, retries 0, fresh topic)."""
    source: dict[str, Any] = {"conn_id": "demo_source", "task": ds.name}
    if args.concurrency:
        source["concurrency"] = args.concurrency
    task: dict[str, Any] = {
        "id": ds.name,
        "name": f"crawl benchmark {ds.total}",
        "source": source,
        "batch_size": ds.batch,
        "filter": {"days": WINDOW_DAYS, "future_tolerance_hours": TOLERANCE_S / 3600},
        "max_expired_batches": MAX_EXPIRED_BATCHES,
        "kafka": {"topic": topic, "partitions": PARTITIONS},
        "schedule": None,
        "retries": 0,
    }
    if args.min_batches_per_chunk:
        task["min_batches_per_chunk"] = args.min_batches_per_chunk
    if args.max_chunks:
        task["max_chunks"] = args.max_chunks
    return {"tasks": [task]}


def read_run_record(pg_uri: str, task_id: str) -> dict[str, Any]:
    """The newest ``crawler_ops.crawl_run`` row of a task."""
    with psycopg.connect(pg_uri) as conn:
        cur = conn.execute(
            "SELECT * FROM crawler_ops.crawl_run WHERE task_id = %s ORDER BY started_at DESC LIMIT 1", (task_id,)
        )
        row = cur.fetchone()
        if row is None:
            raise BenchError(f"no crawler_ops.crawl_run row for task {task_id}: the plan task did not record a run")
        return dict(zip([d.name for d in cur.description or ()], row, strict=True))


def run_project(stack: Stack, admin: SourceAdmin, ds: Dataset, args: argparse.Namespace, out_dir: Path) -> Variant:
    """``airflow dags test crawl_<id> <REF>`` on a one-task config; measured, checked and broken down."""
    topic = f"{ds.name}.project"
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / f"{ds.name}.yaml"
    config_path.write_text(yaml.safe_dump(project_config(ds, topic, args), sort_keys=False))
    log_path = out_dir / f"{ds.name}.dags-test.log"
    command = [*airflow_command(), "dags", "test", f"crawl_{ds.name}", REF.isoformat()]
    admin.clear_requests(ds.name)
    with airflow_env(stack, args.shared_airflow_db) as env:
        env["CRAWLER_OPS_CONFIG"] = str(config_path)
        stats = run_monitored(command, env, log_path)
    if stats.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise BenchError(f"`{' '.join(command)}` exited with {stats.returncode}; log {log_path}:\n{tail}")
    record = read_run_record(stack.pg_uri, ds.name)
    crawl_s = (record["finished_at"] - record["started_at"]).total_seconds() if record["finished_at"] else math.nan
    timeline = parse_timeline(log_path.read_text(errors="replace"), stats.started_epoch, stats.ended_epoch)
    return Variant(
        name="project: dags test (wall)",
        wall_s=stats.wall_s,
        pages=int(record["pages"]),
        fetched=int(record["fetched"]),
        kept=int(record["kept"]),
        published=int(record["published"]),
        rate=int(record["fetched"]) / stats.wall_s,
        requests=admin.requests(ds.name),
        keys=check_keys(topic_keys(stack.bootstrap, topic), ds.in_window_ids),
        cpu_s=stats.cpu_s,
        details={
            "topic": topic,
            "command": " ".join(command),
            "config": str(config_path),
            "log": str(log_path),
            "crawl_s": crawl_s,
            "airflow_overhead_s": stats.wall_s - crawl_s,
            "process": asdict(stats),
            "ref_time_ok": record["ref_time"] == REF,
            "run_record": {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in record.items()},
            "timeline": timeline,
        },
    )


# --------------------------------------------------------------------------- the dags test log


LOG_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+)Z")
TI_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+) map_index=(-?\d+)")
TI_END = re.compile(r"\[DAG TEST\] end task task_id=(\S+) map_index=(-?\d+)")
PROGRESS = re.compile(r" (offsets \d+-\d+): (\d+)/(\d+) batches .*?fetched=(\d+) .*?\((\d+) records/s\)")


def log_epoch(line: str) -> float | None:
    """The UTC timestamp at the start of a log line as epoch seconds."""
    match = LOG_TS.match(line)
    return datetime.fromisoformat(match.group(1) + "+00:00").timestamp() if match else None


# Markers of one task instance's life in ``dags test`` output, in order: the DAG test loop picks it up,
# the in-process Execution API marks it running, pre-execute ends (user code starts), the user code returns,
# the loop sees it finished.
MARKERS = (
    ("running", "Task started"),
    ("code", "::endgroup::"),
    ("returned", "Done. Returned value was"),
)


def parse_timeline(text: str, started: float, ended: float) -> dict[str, Any]:
    """Split the ``dags test`` run into phases: interpreter start, DAG load, and per task instance the
    Airflow set-up (picked up -> user code starts), the user code (the crawl step), Airflow's post-execute
    (XCom push, state update); plus the chunk's last progress line and the process teardown."""
    spans: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    first_log: float | None = None
    for line in text.splitlines():
        moment = log_epoch(line)
        if moment is None:
            continue
        first_log = first_log if first_log is not None else moment
        if match := TI_START.search(line):
            current = {"task": match.group(1), "map_index": int(match.group(2)), "start": moment}
            spans.append(current)
        elif current is None:
            continue
        elif match := PROGRESS.search(line):
            current.update(label=match.group(1), batches=int(match.group(3)), fetched=int(match.group(4)))
            current["records_per_s"] = int(match.group(5))
        elif TI_END.search(line):
            current["end"] = moment
            current = None
        else:
            mark_phase(current, line, moment)
    for span in spans:
        span_phases(span)
    gaps = [b["start"] - a.get("end", a["start"]) for a, b in itertools.pairwise(spans)]
    return {
        "interpreter_start_s": (first_log - started) if first_log else math.nan,
        "startup_s": (spans[0]["start"] - started) if spans else math.nan,
        "teardown_s": (ended - spans[-1].get("end", ended)) if spans else math.nan,
        "between_tasks_s": sum(gaps),
        "spans": [{k: v for k, v in s.items() if k not in ("start", "end", *dict(MARKERS))} for s in spans],
    }


def mark_phase(span: dict[str, Any], line: str, moment: float) -> None:
    """Record the first occurrence of each marker, in order."""
    for name, needle in MARKERS:
        if name in span:
            continue
        if needle in line:
            span[name] = moment
        return


def span_phases(span: dict[str, Any]) -> None:
    """Seconds of set-up, user code and post-execute of one task instance (missing markers count as 0)."""
    end = span.get("end", span["start"])
    code = span.get("code", span.get("running", span["start"]))
    returned = span.get("returned", end)
    span["setup_s"] = code - span["start"]
    span["user_code_s"] = returned - code
    span["post_s"] = end - returned


# --------------------------------------------------------------------------- optional: the real scheduler


SERVICE_STARTUP_S = 240.0
RUN_TIMEOUT_S = 1800.0
TERMINAL_STATES = ("success", "failed")
TASK_ORDER = ("plan", "crawl_chunk", "commit")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_service(name: str, arguments: Sequence[str], env: dict[str, str], log_dir: Path) -> subprocess.Popen[bytes]:
    """Start ``airflow <arguments>`` in its own session, output in ``log_dir/<name>.log``."""
    with (log_dir / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            [*airflow_command(), *arguments],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )


def stop_service(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM a service this benchmark started, wait, then SIGKILL it and whichever of its own
    descendants (recorded before the stop, by pid) are still alive."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    _, alive = psutil.wait_procs(descendants, timeout=10)
    for child in alive:
        with suppress(psutil.NoSuchProcess):
            child.kill()


def metadata_db(env: dict[str, str]) -> Path:
    """The SQLite file of a private Airflow home."""
    return Path(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///"))


def sqlite_rows(db: Path, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read-only query on the metadata DB while the scheduler writes to it."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


@contextmanager
def scheduler_services(stack: Stack, config_path: Path, log_dir: Path) -> Iterator[dict[str, str]]:
    """api-server + scheduler (LocalExecutor) + dag-processor on a quiesced private copy of the metadata DB,
    parsing only the benchmark's config; all three are stopped (by pid) on exit."""
    with airflow_env(stack, shared=False, quiesce=True) as env:
        port = free_port()
        env.update(
            CRAWLER_OPS_CONFIG=str(config_path),
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        )
        services: list[subprocess.Popen[bytes]] = []
        try:
            services.append(
                start_service("api-server", ["api-server", "-H", "127.0.0.1", "-p", str(port)], env, log_dir)
            )
            services.append(start_service("scheduler", ["scheduler"], env, log_dir))
            services.append(start_service("dag-processor", ["dag-processor"], env, log_dir))
            env["_BENCH_SCHEDULER_PID"] = str(services[1].pid)
            wait_for_services(services, port, log_dir)
            yield env
        finally:
            for proc in reversed(services):
                stop_service(proc)
            with suppress(OSError):
                shutil.copytree(env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"], log_dir / "task_logs", dirs_exist_ok=True)


def wait_for_services(services: Sequence[subprocess.Popen[bytes]], port: int, log_dir: Path) -> None:
    """Until the api-server answers; fails with the log's tail when a service exits early."""
    deadline = time.monotonic() + SERVICE_STARTUP_S
    while time.monotonic() < deadline:
        check_alive(services, log_dir)
        with suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=2).status_code < 500:
                return
        time.sleep(0.5)
    raise BenchError(f"the Airflow api-server did not answer on port {port} within {SERVICE_STARTUP_S:.0f}s")


def check_alive(services: Sequence[subprocess.Popen[bytes]], log_dir: Path) -> None:
    """Raise BenchError naming the service (and its log) that exited."""
    names = ("api-server", "scheduler", "dag-processor")
    for name, proc in zip(names, services, strict=False):
        if proc.poll() is not None:
            log = log_dir / f"{name}.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise BenchError(f"airflow {name} exited with {proc.returncode}; {log}:\n{tail}")


def wait_for_dag(env: dict[str, str], dag_id: str, timeout: float = SERVICE_STARTUP_S) -> None:
    """Until the dag-processor has serialised ``dag_id``; unpause it if it was created paused."""
    db = metadata_db(env)
    deadline = time.monotonic() + timeout
    query = (
        "SELECT d.is_paused FROM dag d JOIN serialized_dag s ON s.dag_id = d.dag_id "
        "WHERE d.dag_id = ? AND d.is_stale = 0"
    )
    while time.monotonic() < deadline:
        rows = sqlite_rows(db, query, dag_id)
        if rows:
            if rows[0][0]:
                subprocess.run(
                    [*airflow_command(), "dags", "unpause", dag_id], env=env, capture_output=True, check=True
                )
            return
        time.sleep(0.5)
    raise BenchError(f"the dag-processor did not register {dag_id} within {timeout:.0f}s")


@dataclass
class TreeMemory:
    """Peak RSS per process of a process tree, sampled while a run is in progress.

    ``peak_total`` sums RSS over the tree and so counts the pages that forked LocalExecutor workers share
    with the scheduler once per process: an upper bound, not a measurement; per-pid peaks are meaningful.
    """

    root: int
    per_pid: dict[int, int] = field(default_factory=dict)
    peak_total: int = 0

    def sample(self) -> None:
        try:
            members = [psutil.Process(self.root), *psutil.Process(self.root).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        total = 0
        for member in members:
            with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                rss = member.memory_info().rss
                total += rss
                self.per_pid[member.pid] = max(self.per_pid.get(member.pid, 0), rss)
        self.peak_total = max(self.peak_total, total)


def utc(text: str | None) -> float | None:
    """Epoch seconds of a naive-UTC SQLite timestamp."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() if text else None


def trigger_and_wait(env: dict[str, str], dag_id: str) -> tuple[dict[str, Any], TreeMemory]:
    """``airflow dags trigger`` (no logical date: the run's reference is its run_after) and poll the run
    until it finishes, sampling the scheduler tree's memory."""
    db = metadata_db(env)
    memory = TreeMemory(int(env["_BENCH_SCHEDULER_PID"]))
    started = time.perf_counter()
    trigger = subprocess.run([*airflow_command(), "dags", "trigger", dag_id], env=env, capture_output=True, text=True)
    trigger_s = time.perf_counter() - started
    if trigger.returncode != 0:
        raise BenchError(f"airflow dags trigger {dag_id} failed: {trigger.stderr[-1500:]}")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        memory.sample()
        rows = sqlite_rows(db, "SELECT state, queued_at, start_date, end_date FROM dag_run WHERE dag_id = ?", dag_id)
        if rows and rows[0][0] in TERMINAL_STATES:
            state, queued, start, end = rows[0]
            wall = time.perf_counter() - started
            return {"state": state, "trigger_cli_s": trigger_s, "wall_s": wall, **run_times(queued, start, end)}, memory
        time.sleep(0.05)
    raise BenchError(f"{dag_id}: the triggered run did not finish within {RUN_TIMEOUT_S:.0f}s")


def run_times(queued: str | None, start: str | None, end: str | None) -> dict[str, float | None]:
    q, s, e = utc(queued), utc(start), utc(end)
    return {
        "queued_to_start_s": (s - q) if q and s else None,
        "run_s": (e - s) if s and e else None,
    }


def task_instances(env: dict[str, str], dag_id: str, memory: TreeMemory) -> list[dict[str, Any]]:
    """Per task instance: executor latency (queued->start), duration, its process's peak RSS."""
    rows = sqlite_rows(
        metadata_db(env),
        "SELECT task_id, map_index, queued_dttm, start_date, end_date, pid, state FROM task_instance "
        "WHERE dag_id = ? ORDER BY start_date",
        dag_id,
    )
    ends: dict[str, float] = {}
    for task_id, _, _, _, end, _, _ in rows:
        ends[task_id] = max(ends.get(task_id, 0.0), utc(end) or 0.0)
    result = []
    for task_id, map_index, queued, start, end, pid, state in rows:
        q, s, e = utc(queued), utc(start), utc(end)
        ready = upstream_done(task_id, ends)
        result.append(
            {
                "task": task_id,
                "map_index": map_index,
                "state": state,
                "since_upstream_done_s": (s - ready) if s and ready else None,
                "queued_to_start_s": (s - q) if q and s else None,
                "duration_s": (e - s) if s and e else None,
                "peak_rss_mb": memory.per_pid.get(pid, 0) / 2**20 if pid else None,
            }
        )
    return result


def task_log_rates(log_root: Path) -> dict[int, int]:
    """The records/s of each chunk's last progress line, from the task logs (JSON lines) by map index."""
    rates: dict[int, int] = {}
    for path in log_root.glob("dag_id=*/run_id=*/task_id=crawl_chunk/map_index=*/attempt=*.log"):
        index = int(path.parent.name.removeprefix("map_index="))
        for line in path.read_text(errors="replace").splitlines():
            with suppress(ValueError, TypeError):
                match = PROGRESS.search(" " + str(json.loads(line).get("event", "")))
                if match:
                    rates[index] = int(match.group(5))
    return rates


def upstream_done(task_id: str, ends: dict[str, float]) -> float | None:
    """When the tasks before ``task_id`` in plan -> crawl_chunk -> commit had all finished."""
    if task_id not in TASK_ORDER:
        return None
    before = [ends[t] for t in TASK_ORDER[: TASK_ORDER.index(task_id)] if ends.get(t)]
    return max(before) if before else None


def run_scheduler_variant(stack: Stack, args: argparse.Namespace, total: int, out_dir: Path) -> Variant:
    """The crawl DAG triggered on a real scheduler with LocalExecutor (each task in its own process).

    ``dags trigger`` gives a schedule-less DAG no data interval of its own: its reference is the trigger
    time (data_interval_end = run_after), so the data set is created around "now" just before the trigger
    and checked against the truth at the run's recorded ``ref_time``.
    """
    admin = SourceAdmin(stack.source_url)
    name = dataset_name()
    placeholder = Dataset(name, total, args.share, args.batch_size, frozenset())
    topic = f"{name}.scheduler"
    log_dir = out_dir / f"{name}.scheduler"
    log_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(project_config(placeholder, topic, args), sort_keys=False))
    with scheduler_services(stack, config_path, log_dir) as env:
        wait_for_dag(env, f"crawl_{name}")
        now = datetime.now(UTC).replace(microsecond=0)
        admin.create(name, total, args.share, args.batch_size, ref=now)
        run, memory = trigger_and_wait(env, f"crawl_{name}")
        tis = task_instances(env, f"crawl_{name}", memory)
    chunk_rates = task_log_rates(log_dir / "task_logs")
    for ti in tis:
        ti["records_per_s"] = chunk_rates.get(ti["map_index"]) if ti["task"] == "crawl_chunk" else None
    record = read_run_record(stack.pg_uri, name)
    truth = admin.truth(name, record["ref_time"])
    keys = check_keys(topic_keys(stack.bootstrap, topic), truth)
    return Variant(
        name="project: scheduler + LocalExecutor (trigger→done)",
        wall_s=run["wall_s"],
        pages=int(record["pages"]),
        fetched=int(record["fetched"]),
        kept=int(record["kept"]),
        published=int(record["published"]),
        rate=int(record["fetched"]) / run["wall_s"],
        requests=admin.requests(name),
        keys=keys,
        details={
            "dataset": name,
            "ref_time": record["ref_time"].isoformat(),
            "run": run,
            "crawl_s": (record["finished_at"] - record["started_at"]).total_seconds(),
            "run_status": record["status"],
            "task_instances": tis,
            "scheduler_tree_rss_sum_mb": memory.peak_total / 2**20,  # double-counts shared pages of forks
            "logs": str(log_dir),
        },
    )


# --------------------------------------------------------------------------- one suite


def dataset_name() -> str:
    return f"bench_{secrets.token_hex(4)}"


def run_suite(stack: Stack, args: argparse.Namespace, total: int, out_dir: Path, say: Callable[[str], None]) -> Suite:
    """All variants for one total, in a fixed order, on one fresh data set."""
    admin = SourceAdmin(stack.source_url)
    ds = admin.create(dataset_name(), total, args.share, args.batch_size)
    say(f"data set {ds.name}: total={total} in_window={ds.in_window} batch={ds.batch}")
    scratch = f"{ds.name}.warmup"
    create_topic(stack.bootstrap, scratch)
    variants: list[Variant] = []
    say("source drain ...")
    variants.append(measure_drain(stack.source_url, ds, args.drain_passes))
    say("sink limit ...")
    pages = fetch_window_pages(stack.source_url, ds)
    variants.append(measure_sink(stack, ds, pages, scratch))
    components = measure_components(stack, ds, pages, scratch)
    del pages
    say("old algorithm, no sleep ...")
    variants.append(measure_old(stack, admin, ds, 0.0, scratch))
    if not args.skip_old_sleep:
        say(f"old algorithm, {OLD_SLEEP_S} s sleep ...")
        variants.append(measure_old(stack, admin, ds, OLD_SLEEP_S, scratch))
    say("project: airflow dags test ...")
    project = run_project(stack, admin, ds, args, out_dir)
    variants.append(project)
    variants.append(crawl_span_variant(project))
    scheduler: dict[str, Any] = {}
    if args.scheduler:
        say("project: real scheduler + LocalExecutor (api-server, scheduler, dag-processor on a private DB) ...")
        variant = run_scheduler_variant(stack, args, total, out_dir)
        variants += [variant, crawl_span_variant(variant, "project: scheduler crawl span (PG)")]
        scheduler = variant.details
    problems = check_suite(ds, variants, project)
    return Suite(
        dataset={"name": ds.name, "total": total, "in_window": ds.in_window, "batch": ds.batch, "share": ds.share},
        variants=variants,
        project=project.details,
        components=components,
        problems=problems,
        scheduler=scheduler,
    )


def crawl_span_variant(project: Variant, name: str = "project: crawl span (PG)") -> Variant:
    """The project's crawl alone: plan start to commit end, as recorded in crawler_ops.crawl_run."""
    crawl_s = float(project.details["crawl_s"])
    return Variant(
        name=name,
        wall_s=crawl_s,
        pages=project.pages,
        fetched=project.fetched,
        kept=project.kept,
        published=project.published,
        rate=project.fetched / crawl_s if crawl_s > 0 else math.nan,
    )


def check_suite(ds: Dataset, variants: Sequence[Variant], project: Variant) -> list[str]:
    """Correctness problems: topic keys differ from the truth, counters disagree, the run failed."""
    problems = [
        f"{v.name}: topic keys differ from the truth: missing {v.keys.missing} (e.g. {v.keys.sample_missing}), "
        f"extra {v.keys.extra} (e.g. {v.keys.sample_extra})"
        for v in variants
        if v.keys is not None and not v.keys.ok
    ]
    record = project.details["run_record"]
    if record.get("status") != "success":
        problems.append(f"project: crawl_run status is {record.get('status')!r}, errors {record.get('errors')}")
    if not project.details["ref_time_ok"]:
        problems.append(f"project: crawl_run ref_time is {record.get('ref_time')}, expected {REF.isoformat()}")
    if project.published != ds.in_window:
        problems.append(f"project: published {project.published}, truth has {ds.in_window} in the window")
    if project.requests is not None and project.requests.pages != project.pages:
        problems.append(
            f"project: the source served {project.requests.pages} pages, the run record counts {project.pages}"
        )
    for v in variants:
        if v.name.startswith("project: scheduler +") and (
            v.details["run"]["state"] != "success" or v.details["run_status"] != "success"
        ):
            problems.append(f"{v.name}: DAG run {v.details['run']['state']}, crawl_run {v.details['run_status']}")
    return problems


# --------------------------------------------------------------------------- report


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def main_table(suite: Suite) -> str:
    """The variants table: wall, pages, records/s, kept published, ratios to the drain and the old loop."""
    drain = suite.variant("source drain")
    old = suite.variant("old algorithm (no sleep")
    rows = [
        "| variant | wall s | pages fetched | records fetched/s | kept published | × drain rate "
        "| × old (no sleep) | topic keys = truth |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in suite.variants:
        rate = fmt(v.rate) + (" (produced/s)" if v.rate_basis == "produced" else "")
        rows.append(
            f"| {v.name} | {fmt(v.wall_s, 2)} | {fmt(v.pages) if v.pages is not None else '-'} | {rate} "
            f"| {fmt(v.published) if v.published or v.kept else '-'} "
            f"| {fmt(v.rate / drain.rate, 3) if drain else '-'} | {fmt(v.rate / old.rate, 2) if old else '-'} "
            f"| {v.keys.short() if v.keys else '-'} |"
        )
    return "\n".join(rows)


def pages_table(suite: Suite) -> str:
    """Pages fetched on the first crawl against ceil(in_window / batch) + max_expired_batches."""
    ds = suite.dataset
    expected = math.ceil(ds["in_window"] / ds["batch"]) + MAX_EXPIRED_BATCHES
    rows = [
        f"First crawl: in_window={ds['in_window']}, batch={ds['batch']}: ceil(in_window/batch) + "
        f"max_expired_batches = {math.ceil(ds['in_window'] / ds['batch'])} + {MAX_EXPIRED_BATCHES} = {expected}; "
        f"log2(total) = {math.log2(ds['total']):.1f}",
        "",
        "| variant | pages fetched | expected | pages served (source log) | 1-record probes | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for v in suite.variants:
        if v.requests is None:
            continue
        rows.append(
            f"| {v.name} | {v.pages} | {expected} | {v.requests.pages} | {v.requests.probes} | {v.requests.errors} |"
        )
    return "\n".join(rows)


def breakdown(suite: Suite) -> str:
    """Where the project's wall time goes, from the process, the run record and the dags test log."""
    p = suite.project
    proc, timeline = p["process"], p["timeline"]
    lines = [
        f"wall {p['process']['wall_s']:.2f} s = crawl span (PG started_at..finished_at) {p['crawl_s']:.2f} s "
        f"+ Airflow overhead {p['airflow_overhead_s']:.2f} s; CPU {proc['cpu_s']:.1f} s; "
        f"peak RSS of the process tree {proc['peak_tree_rss_mb']:.0f} MB (polled every 20 ms)",
        f"interpreter + imports until the first log line {timeline['interpreter_start_s']:.2f} s; until the first "
        f"task starts {timeline['startup_s']:.2f} s; between tasks {timeline['between_tasks_s']:.2f} s; "
        f"after the last task {timeline['teardown_s']:.2f} s",
        "",
        "| task | map | Airflow set-up s | user code s | Airflow post-execute s | batches | fetched "
        "| records/s (last progress line) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for span in timeline["spans"]:
        lines.append(
            f"| {span['task']} | {span['map_index']} | {span['setup_s']:.2f} | {span['user_code_s']:.2f} "
            f"| {span['post_s']:.2f} | {span.get('batches', '-')} | {fmt(span.get('fetched'))} "
            f"| {fmt(span.get('records_per_s'))} |"
        )
    c = suite.components
    if c:
        lines += [
            "",
            f"Per page of {c['records_per_page']:.0f} in-window records (median of {c['pages_sampled']:.0f}): "
            f"GET {c['get_ms']:.1f} ms, msgspec decode {c['decode_ms']:.1f} ms, project filter+encode "
            f"(records.build_messages) {c['filter_encode_ms']:.1f} ms, produce+flush {c['produce_flush_ms']:.1f} ms",
        ]
    return "\n".join(lines)


def growth_table(suites: Sequence[Suite]) -> str:
    """How rates, pages, time and memory grow with the total."""
    rows = [
        "| total | in window | drain rec/s | old rec/s | old pages | project wall s | crawl s | overhead s "
        "| project rec/s (wall) | (crawl) | pages | expected | probes | chunks | peak RSS MB | keys ok |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in suites:
        drain, old = s.variant("source drain"), s.variant("old algorithm (no sleep")
        proj, span = s.variant("project: dags"), s.variant("project: crawl")
        if not (drain and old and proj and span):
            continue
        chunks = sum(1 for x in s.project["timeline"]["spans"] if x["task"] == "crawl_chunk")
        expected = math.ceil(s.dataset["in_window"] / s.dataset["batch"]) + MAX_EXPIRED_BATCHES
        rows.append(
            f"| {s.dataset['total']:,} | {s.dataset['in_window']:,} | {fmt(drain.rate)} | {fmt(old.rate)} "
            f"| {old.pages} | {proj.wall_s:.2f} | {span.wall_s:.2f} | {s.project['airflow_overhead_s']:.2f} "
            f"| {fmt(proj.rate)} | {fmt(span.rate)} | {proj.pages} | {expected} "
            f"| {proj.requests.probes if proj.requests else '-'} | {chunks} "
            f"| {s.project['process']['peak_tree_rss_mb']:.0f} | {'yes' if not s.problems else '**NO**'} |"
        )
    return "\n".join(rows)


def scheduler_breakdown(details: dict[str, Any]) -> str:
    """Where a scheduler-run's time goes: trigger, queueing, each task process, the gaps between them."""
    run = details["run"]
    lines = [
        f"Real scheduler ({details['dataset']}, ref {details['ref_time']}): trigger→done {run['wall_s']:.2f} s "
        f"(`airflow dags trigger` CLI {run['trigger_cli_s']:.2f} s, run queued→started "
        f"{fmt(run['queued_to_start_s'], 2)} s, started→finished {fmt(run['run_s'], 2)} s), crawl span (PG) "
        f"{details['crawl_s']:.2f} s; logs {details['logs']}",
        "",
        "| task | map | start − upstream done s (incl. waiting for a slot) | queued→start s | duration s "
        "| task process peak RSS MB | records/s (last progress line) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for ti in details["task_instances"]:
        lines.append(
            f"| {ti['task']} | {ti['map_index']} | {fmt(ti['since_upstream_done_s'], 2)} "
            f"| {fmt(ti['queued_to_start_s'], 2)} | {fmt(ti['duration_s'], 2)} | {fmt(ti['peak_rss_mb'])} "
            f"| {fmt(ti.get('records_per_s'))} |"
        )
    return "\n".join(lines)


def render(suites: Sequence[Suite], header: str) -> str:
    parts = [header]
    for suite in suites:
        ds = suite.dataset
        parts += [
            f"\n## total {ds['total']:,} ({ds['name']}, in window {ds['in_window']:,}, batch {ds['batch']})\n",
            main_table(suite),
            "",
            pages_table(suite),
            "",
            breakdown(suite),
        ]
        if suite.scheduler:
            parts += ["", scheduler_breakdown(suite.scheduler)]
        parts += [f"\n**CORRECTNESS PROBLEM**: {p}" for p in suite.problems]
    if len(suites) > 1:
        parts += ["\n## growth with the total\n", growth_table(suites)]
    return "\n".join(parts)


def header_text(args: argparse.Namespace, stack: Stack, load_before: tuple[float, ...]) -> str:
    load_after = os.getloadavg()
    return (
        f"# crawl benchmark {datetime.now(UTC):%Y-%m-%d %H:%M:%S}Z\n\n"
        f"`{' '.join(sys.argv)}`; ref {REF.isoformat()}, window {WINDOW_DAYS:g} d + {TOLERANCE_S // 3600} h; "
        f"source {stack.source_url}, Kafka {stack.bootstrap}; {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after. Ratios compare records/s measured in this run."
    )


def write_json(path: Path, args: argparse.Namespace, suites: Sequence[Suite], markdown: str) -> None:
    """The whole run as JSON (bench/results is git-ignored)."""
    options = {k: v for k, v in vars(args).items() if k != "total_list"}
    document = {
        "created": datetime.now(UTC).isoformat(),
        "argv": sys.argv,
        "options": options,
        "cpus": os.cpu_count(),
        "suites": [asdict(s) for s in suites],
        "markdown": markdown,
    }
    path.write_text(json.dumps(document, indent=2, default=str, ensure_ascii=False))


def main(argv: Sequence[str] | None = None) -> int:
    """Run every variant for each total, print the tables, write the JSON; 1 when a check failed."""
    args = parse_args(argv)

    def say(message: str) -> None:
        print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)

    try:
        stack = load_stack()
        load_before = os.getloadavg()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out_dir = RESULTS_DIR / stamp
        suites = [run_suite(stack, args, total, out_dir, say) for total in args.total_list]
    except BenchError as exc:
        print(f"crawl_bench: error: {exc}", file=sys.stderr)
        return 2
    markdown = render(suites, header_text(args, stack, load_before))
    print(markdown)
    json_path = RESULTS_DIR / f"{stamp}.json"
    write_json(json_path, args, suites, markdown)
    say(f"results: {json_path}, logs in {out_dir}")
    problems = [p for s in suites for p in s.problems]
    for problem in problems:
        print(f"CORRECTNESS MISMATCH: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
