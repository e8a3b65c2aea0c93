"""What exactly-once delivery costs: the same first crawl with ``at_least_once`` and ``exactly_once``, in one run.

Each round crawls one fresh demo-source data set twice, once per delivery mode (alternating which goes first), as
one chunk in this process (plan -> crawl_chunk -> commit, no Airflow scheduler), and checks that the topic holds
every in-window record exactly once (read_committed). Reported: the chunk's published records/s per mode (wall
time of crawl_chunk, producer set-up included) and the ratio exactly_once / at_least_once, per round and as the
median.

    .venv/bin/python bench/delivery_bench.py                    # 50 000 records, batch 1000, 3 rounds
    .venv/bin/python bench/delivery_bench.py --total 20000 --batch 500 --rounds 5

The stack must be up (``.venv/bin/python dev/stack.py up``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from crawlbench.common import REF, BenchError
from crawlbench.environment import load_stack
from crawlbench.source import SourceAdmin, dataset_name
from crawlbench.topics import check_topic

MODES = ("at_least_once", "exactly_once")


def crawl_once(name: str, mode: str, batch: int, bootstrap: str, truth: frozenset[str]) -> dict[str, Any]:
    """One first crawl of data set ``name`` in one chunk; returns its figures (raises when the topic is wrong)."""
    from crawler_ops.config import CrawlTaskConfig
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run

    task_id = f"{name}_{mode}"
    cfg = CrawlTaskConfig.model_validate(
        {
            "id": task_id,
            "source": {"task": name, "requests_per_s": None, "max_in_flight": None},
            "kafka": {"topic": f"{name}.{mode}", "delivery": mode, "partitions": 3},
            "batch_size": batch,
            "max_chunks": 1,
            "schedule": None,
        }
    )
    run = RunContext(cfg=cfg, run_id=f"bench-{mode}", ref=REF, params=RunParams())
    [chunk] = plan_run(run)
    started = time.perf_counter()  # the whole chunk: producer set-up (transactions) and marker read included
    result = crawl_chunk(run, chunk)
    wall = time.perf_counter() - started
    summary = commit_run(run, [chunk], [result])
    check = check_topic(bootstrap, cfg.kafka.topic, truth)
    if summary.status != "success" or not check.ok:
        raise BenchError(f"{mode}: run {summary.status}, topic {check.short()}")
    return {
        "mode": mode,
        "published": result["published"],
        "elapsed_s": wall,
        "published_per_s": result["published"] / max(wall, 1e-9),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=50_000, help="records per data set")
    parser.add_argument("--share", type=float, default=1.0, help="share of records in the window")
    parser.add_argument("--batch", type=int, default=1_000, help="records per page and batch")
    parser.add_argument("--rounds", type=int, default=3, help="data sets, each crawled once per mode")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        stack = load_stack()
        admin = SourceAdmin(stack.source_url)
        ratios = []
        print("| round | mode | published | chunk s | published/s |\n|---|---|---:|---:|---:|")
        for index in range(args.rounds):
            dataset = admin.create(dataset_name(), args.total, args.share, args.batch)
            order = MODES if index % 2 == 0 else MODES[::-1]
            figures = {
                m: crawl_once(dataset.name, m, args.batch, stack.bootstrap, dataset.in_window_ids) for m in order
            }
            for mode in MODES:
                f = figures[mode]
                rate = f["published_per_s"]
                print(f"| {index + 1} | {mode} | {f['published']:,} | {f['elapsed_s']:.2f} | {rate:,.0f} |")
            ratios.append(figures["exactly_once"]["published_per_s"] / figures["at_least_once"]["published_per_s"])
        rounds = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"\nexactly_once / at_least_once published/s: median {statistics.median(ratios):.2f} (rounds: {rounds})")
    except BenchError as exc:
        print(f"delivery bench: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
