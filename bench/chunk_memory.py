"""Peak memory of one crawl chunk under hostile pages, no services needed: a loopback source (tests/hostile_source.py)
answers every page request with the same hostile body, and one chunk (dry run: nothing claimed, nothing published)
crawls ``--batches`` batches with ``--concurrency`` pages in flight, in a fresh child process per scenario.

Examples::

    .venv/bin/python bench/chunk_memory.py                  # every scenario, concurrency 8, 16 batches
    .venv/bin/python bench/chunk_memory.py --scenario empty-records

Scenarios (issue 27): ``bomb`` (a gzip bomb inflating past the 64 MiB response cap on every answer), ``bomb-fits`` (a
gzip-compressed valid page padded to just under the cap on every answer: read, joined and decoded whole),
``empty-records`` (10^6 records ``{}`` per page, asked for 100). Printed per scenario: the chunk's outcome, the peak
of Python allocations while it ran (tracemalloc) and the growth of the process's peak RSS (ru_maxrss).
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

CAP = 64 * 2**20
PAGE_HEAD = b'{"code":0,"data":{"total":100000,"data":['


def body(scenario: str) -> tuple[dict[str, str], bytes]:
    """The headers and body every page request is answered with."""
    if scenario == "bomb":
        return {"Content-Encoding": "gzip"}, gzip.compress(b" " * (CAP + 2**20), compresslevel=9)
    if scenario == "bomb-fits":
        record = b'{"id":"r","aae397":"2026-10-31 10:00:00"}'
        page = PAGE_HEAD + b",".join([record] * 100) + b"]}}"
        return {"Content-Encoding": "gzip"}, gzip.compress(page + b" " * (CAP - len(page) - 1024), compresslevel=9)
    if scenario == "empty-records":
        return {}, PAGE_HEAD + b",".join([b"{}"] * 1_000_000) + b"]}}"
    raise ValueError(scenario)


def run_one(scenario: str, concurrency: int, batches: int) -> dict[str, object]:
    from crawler_ops.config import CrawlTaskConfig
    from crawler_ops.crawl.batch_filter import BatchFilter
    from crawler_ops.crawl.chunk import ChunkCrawler
    from crawler_ops.crawl.ledger import DryRunLedger
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.hooks.kafka.producer import DryRunPublisher
    from crawler_ops.hooks.source.hook import SourceApiHook, http_client
    from crawler_ops.planning import Batch
    from tests.hostile_source import HostileSource

    source = HostileSource()
    headers, payload = body(scenario)
    source.replies["list"] = (200, {"Content-Type": "application/json", **headers}, payload)
    cfg = CrawlTaskConfig.model_validate(
        {
            "id": "memory",
            "kafka": {"topic": "t.memory"},
            "source": {"concurrency": concurrency, "max_retries": 0, "requests_per_s": None, "max_in_flight": None},
        }
    )
    run = RunContext(cfg=cfg, run_id="manual__memory", ref=datetime(2026, 11, 1, tzinfo=UTC), params=RunParams())
    hook = SourceApiHook(cfg.source, cfg.id, cfg.source_task)
    conn = SimpleNamespace(**source.connection(), login=None, password=None, extra_dejson={})
    hook.__dict__["client"] = http_client(conn, cfg.source)
    plan = [Batch(lo, lo + 100) for lo in range(100 * (batches - 1), -1, -100)]
    crawler = ChunkCrawler(cfg, plan, "memory", hook, BatchFilter(run, False), DryRunLedger(), DryRunPublisher())
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.monotonic()
    try:
        crawler.crawl()
        outcome = "finished"
    except Exception as exc:  # noqa: BLE001 - reported
        outcome = f"{type(exc).__name__}: {str(exc)[:150]}"
    elapsed = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    source.close()
    return {
        "scenario": scenario,
        "outcome": outcome,
        "seconds": round(elapsed, 2),
        "peak_traced_mib": round(peak / 2**20, 1),
        "peak_rss_growth_mib": round((rss_after - rss_before) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=["bomb", "bomb-fits", "empty-records"], action="append")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.scenario[0], args.concurrency, args.batches)))
        return
    for scenario in args.scenario or ["bomb", "bomb-fits", "empty-records"]:
        cmd = [sys.executable, __file__, "--child", "--scenario", scenario]
        cmd += ["--concurrency", str(args.concurrency), "--batches", str(args.batches)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        print(done.stdout.strip() or done.stderr[-2000:])


if __name__ == "__main__":
    main()
