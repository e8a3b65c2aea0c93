"""Requests of one backfill of a few days, with ``source.window_filter`` and without (probing for the window's offsets).

On a fresh demo-source data set of ``--total`` records (30 % of them in the last 7 days), runs the backfill of the
``--days`` before the last day twice, as a backfill DAG run's steps would (plan, every chunk, commit; a dry run: the
source sees the same requests, nothing is published), once probing the interval's two ends by one-record reads and
once reading the source's filtered view. Prints the count and page requests the source answered for each, their ratio,
and checks that the filtered one kept exactly the interval's records (the source's ground truth; the probing one may
miss records out of time order by more than its margin of one batch at each end: the table says how many).

    .venv/bin/python bench/window_bench.py                          # 10^6 records, 3 days, batch 500, concurrency 4
    .venv/bin/python bench/window_bench.py --total 100000 --batch-size 100

The stack must be up (``.venv/bin/python dev/stack.py up``). Exit status 1 when the check fails, 2 when the stack is not
usable.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from crawlbench.common import REF, BenchError
from crawlbench.environment import load_stack
from crawlbench.source import SourceAdmin

DAY = timedelta(days=1)
#: The demo source's filter by date (its wall times are Asia/Shanghai, the default filter.timezone).
WINDOW_FILTER = {"query": {"from": "{window_start:%Y-%m-%d %H:%M:%S}", "to": "{window_end:%Y-%m-%d %H:%M:%S}"}}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=1_000_000, help="records of the data set (default 10^6)")
    parser.add_argument("--days", type=int, default=3, help="days of the backfill's interval (default 3)")
    parser.add_argument("--batch-size", type=int, default=500, help="records per page (the sample config's 500)")
    parser.add_argument("--concurrency", type=int, default=4, help="pages in flight (the sample config's 4)")
    return parser.parse_args(argv)


def backfill(admin: SourceAdmin, name: str, args: argparse.Namespace, filtered: bool) -> dict[str, float]:
    """One dry-run backfill of ``[REF - 1 d - days, REF - 1 d)``: the requests the source answered, the records kept,
    the seconds it took."""
    from crawler_ops.config import CrawlTaskConfig
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run

    source = {"task": name, "concurrency": args.concurrency, "requests_per_s": None, "max_in_flight": None}
    cfg = CrawlTaskConfig.model_validate(
        {
            "id": f"{name}_{'filtered' if filtered else 'probing'}",
            "kafka": {"topic": f"bench.{name}"},
            "batch_size": args.batch_size,
            "schedule": None,
            "source": source | ({"window_filter": WINDOW_FILTER} if filtered else {}),
        }
    )
    end = REF - DAY
    start = end - args.days * DAY
    run = RunContext(cfg, f"backfill__{name}", end, RunParams(dry_run=True), backfill_interval=(start, end))
    admin._json("DELETE", f"/admin/tasks/{name}/requests")
    began = time.perf_counter()
    chunks = plan_run(run)
    results = [crawl_chunk(replace(run, map_index=i), chunk) for i, chunk in enumerate(chunks)]
    summary = commit_run(run, chunks, results)
    seconds = time.perf_counter() - began
    if summary.status != "success":
        raise BenchError(f"{cfg.id}: the backfill failed: {summary.errors}")
    seen = admin._json("GET", f"/admin/tasks/{name}")["requests"]
    return {"count": seen.get("count", 0), "list": seen.get("list", 0), "kept": summary.counts.kept, "s": seconds}


def interval_truth(admin: SourceAdmin, name: str, start: datetime, end: datetime) -> int:
    """How many records are dated in ``[start, end)`` (whole seconds)."""

    def closed(ref: datetime, tolerance_s: float) -> int:
        params = {"ref": ref.isoformat(), "days": 0, "tolerance_s": tolerance_s}
        return int(admin._json("GET", f"/admin/tasks/{name}/truth", params=params)["in_window_count"])

    return closed(start, (end - start).total_seconds()) - closed(end, 0)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        stack = load_stack()
    except BenchError as exc:
        print(exc, file=sys.stderr)
        return 2
    admin = SourceAdmin(stack.source_url)
    name = f"bench_window_{uuid.uuid4().hex[:8]}"
    admin.put(name, total=args.total, ref=REF.isoformat(), in_window_share=0.3, window_days=7)
    end = REF - DAY
    truth = interval_truth(admin, name, end - args.days * DAY, end)
    figures = {way: backfill(admin, name, args, way == "window_filter") for way in ("probing", "window_filter")}
    print(
        f"{args.days}-day backfill of {truth} records out of {args.total}, batch_size {args.batch_size}, "
        f"concurrency {args.concurrency}\n"
    )
    print("| way | count requests | page requests | all requests | records kept | seconds |")
    print("|---|---|---|---|---|---|")
    for way, seen in figures.items():
        both = seen["count"] + seen["list"]
        kept = f"{seen['kept']:.0f}" + ("" if seen["kept"] == truth else f" ({truth - seen['kept']:.0f} missed)")
        print(f"| {way} | {seen['count']:.0f} | {seen['list']:.0f} | {both:.0f} | {kept} | {seen['s']:.1f} |")
    probing, filtered = (figures[w]["count"] + figures[w]["list"] for w in figures)
    print(f"\nratio probing / window_filter: {probing / filtered:.3f} ({probing - filtered:.0f} requests fewer)")
    if figures["probing"]["kept"] != truth:
        print(
            "probing missed records dated in the interval: the demo's records are out of time order by more than "
            "the one batch of margin the search leaves at each end"
        )
    if figures["window_filter"]["kept"] != truth:
        print(f"CHECK FAILED: window_filter kept {figures['window_filter']['kept']:.0f}, the interval holds {truth}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
