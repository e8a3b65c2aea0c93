"""Where a chunk's time goes: one first-crawl chunk run in this process (no Airflow task around it), each part
of its loop timed, and the CPU the chunk, its page check's helper, the demo source, Kafka and PostgreSQL spent
meanwhile.

Examples::

    .venv/bin/python bench/chunk_parts.py                          # 200 000 records, 0 ms, 3 runs
    .venv/bin/python bench/chunk_parts.py --latency 50 --concurrency 4

The parts are timed by wrapping the chunk's collaborators (ledger claim and finish, publisher send and confirm,
the filter, the wait for a page); the figures are wall seconds on the thread named beside them. The chunk's own
thread waits for a page, filters and produces; the fetch threads claim and read pages ahead; the checkpoint
thread waits for Kafka's acknowledgements and records batches done while the next batch is filtered, so its
parts overlap the others. Needs the running
stack (``dev/stack.py up``), like ``crawl_bench.py``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil

from crawlbench.common import REF, TOLERANCE_S, WINDOW_DAYS
from crawlbench.environment import devstack, load_stack
from crawlbench.source import SourceAdmin, dataset_name

PARTS = Counter[str]


def timed(parts: PARTS, owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper that adds its wall time to ``parts[label]``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            parts[label] += time.perf_counter() - started

    setattr(owner, name, wrapper)


def instrument(parts: PARTS) -> None:
    """Time the parts of ``ChunkCrawler.crawl``'s loop."""
    from crawler_ops.crawl import chunk, ledger
    from crawler_ops.hooks.kafka import producer

    timed(parts, ledger.StatusTableLedger, "claim", "claim (PostgreSQL, fetch threads)")
    timed(parts, ledger.StatusTableLedger, "finish", "finish (PostgreSQL, checkpoint thread)")
    timed(parts, producer.KafkaPublisher, "send", "send (produce)")
    timed(parts, producer.KafkaPublisher, "confirm", "confirm (Kafka acks, checkpoint thread)")
    timed(parts, chunk.BatchFilter, "filter", "filter + encode")
    filtered = chunk.ChunkCrawler.filtered

    def waiting(self: Any, ahead: Any) -> Any:
        started = time.perf_counter()
        ahead.page.result()
        parts["wait for a page"] += time.perf_counter() - started
        return filtered(self, ahead)

    chunk.ChunkCrawler.filtered = waiting  # type: ignore[method-assign]


def stack_processes() -> dict[str, list[psutil.Process]]:
    """The demo source, Kafka and PostgreSQL (the postmaster and its backends) of the running stack."""
    found: dict[str, list[psutil.Process]] = {}
    for name in ("source", "kafka"):
        pid = devstack.read_pid(name)
        found[name] = [psutil.Process(pid)] if pid else []
    postmaster = subprocess.run(["pgrep", "-o", "-f", "postgres -D"], capture_output=True, text=True).stdout.split()
    found["postgres"] = [psutil.Process(int(postmaster[0]))] if postmaster else []
    return found


def cpu_by_pid(procs: list[psutil.Process]) -> dict[int, float]:
    """CPU seconds so far of each process and its descendants, by pid; a process's own include those of its children
    that ended (PostgreSQL's backends for the chunk's connections start and end inside the block)."""
    seconds: dict[int, float] = {}
    for proc in procs:
        for member in (proc, *proc.children(recursive=True)):
            try:
                times = member.cpu_times()
            except psutil.NoSuchProcess:
                continue
            seconds[member.pid] = times.user + times.system + times.children_user + times.children_system
    return seconds


@contextmanager
def cpu_used(into: dict[str, float]) -> Iterator[None]:
    """CPU seconds this process, its children that ended inside the block (the page check's helper), each stack
    service (its processes alive at both ends) and the whole machine used inside the block."""
    services = stack_processes()

    def busy() -> float:
        machine = psutil.cpu_times()
        return sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)

    def children() -> float:
        times = os.times()
        return times.children_user + times.children_system

    before = {name: cpu_by_pid(procs) for name, procs in services.items()}
    chunk, helper, machine = time.process_time(), children(), busy()
    yield
    into.update(chunk=time.process_time() - chunk, helper=children() - helper, machine=busy() - machine)
    for name, procs in services.items():
        after = cpu_by_pid(procs)
        into[name] = sum(after[pid] - spent for pid, spent in before[name].items() if pid in after)


def run_chunk(args: argparse.Namespace, admin: SourceAdmin, parts: PARTS) -> tuple[dict[str, Any], dict[str, float]]:
    """A fresh data set, its first crawl planned into one chunk, the chunk crawled; its result and CPU."""
    from crawler_ops.config import CrawlTaskConfig
    from crawler_ops.crawl.preflight import ensure_topics
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import crawl_chunk
    from crawler_ops.planning import ChunkPlan, chunk_batches, iter_plan

    name = dataset_name()
    ds = admin.create(name, args.total, args.share, 1000)
    admin.set_latency(name, args.latency)
    source: dict[str, Any] = {"task": name, "requests_per_s": None, "max_in_flight": None} | (
        {"concurrency": args.concurrency} if args.concurrency else {}
    )
    task = {"id": name, "source": source, "batch_size": 1000, "kafka": {"topic": f"{name}.chunk"}}
    task["filter"] = {"days": WINDOW_DAYS, "future_tolerance_hours": TOLERANCE_S / 3600}
    run = RunContext(
        cfg=CrawlTaskConfig.model_validate(task), run_id=f"chunk_parts_{name}", ref=REF, params=RunParams()
    )
    floor = max(0, ds.total - ds.in_window - 5 * 1000)
    batches = list(iter_plan(ds.total, 0, 1000, floor=floor))
    store = run.store()
    try:
        with store.transaction() as cur:
            store.ensure_schema(cur)
        with store.transaction(lock=True) as cur:
            store.batches.insert(cur, batches, run.run_id)
            store.start_run(cur, run.run_id, "first", REF, total=ds.total, planned=len(batches))
    finally:
        store.close()
    ensure_topics(run)
    parts.clear()
    cpu: dict[str, float] = {}
    with cpu_used(cpu):
        started = time.perf_counter()
        result = crawl_chunk(run, ChunkPlan.of(chunk_batches(batches, 1, 1)[0], early_stop=True))
        cpu["wall"] = time.perf_counter() - started
    return result, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=200_000)
    parser.add_argument("--share", type=float, default=0.3)
    parser.add_argument("--latency", type=float, default=0.0, help="ms the source adds to every request")
    parser.add_argument("--concurrency", type=int, default=None, help="source.concurrency (default: its own)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # the chunk's progress lines would interleave with the table
    stack = load_stack()
    admin = SourceAdmin(stack.source_url)
    parts: PARTS = Counter()
    instrument(parts)
    print(f"`{' '.join(sys.argv)}`\n")
    print(
        "| run | pages | records/s | wall s | " + " | ".join(LABELS) + " | CPU s: chunk | its helper | source "
        "| Kafka | PostgreSQL | whole machine |"
    )
    print("|---:" * (5 + len(LABELS) + 5) + "|")
    for index in range(args.runs):
        result, cpu = run_chunk(args, admin, parts)
        wall = cpu["wall"]
        print(
            f"| {index + 1} | {result['pages']} | {result['fetched'] / wall:,.0f} | {wall:.2f} | "
            + " | ".join(f"{parts[label]:.2f}" for label in LABELS)
            + f" | {cpu['chunk']:.2f} | {cpu['helper']:.2f} | {cpu['source']:.2f} | {cpu['kafka']:.2f} "
            f"| {cpu['postgres']:.2f} | {cpu['machine']:.2f} |"
        )
    return 0


LABELS = (
    "claim (PostgreSQL, fetch threads)",
    "wait for a page",
    "filter + encode",
    "send (produce)",
    "confirm (Kafka acks, checkpoint thread)",
    "finish (PostgreSQL, checkpoint thread)",
)

if __name__ == "__main__":
    sys.exit(main())
