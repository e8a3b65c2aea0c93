"""End-to-end crawl benchmark against the running local stack, all variants in one run, reported as ratios.

Variants, on one fresh demo-source data set ``bench_<random>``:

* **source drain**: one sequential httpx client fetches and decodes every page, discards it (source limit);
* **sink limit**: the in-window records (fetched untimed) produced to a fresh topic by an idempotent
  producer (``acks=all``), one flush at the end (sink limit);
* **old algorithm**: the old service's loop, reimplemented: one page at a time from ``total - batch``
  down, filter, produce and flush per page, first-crawl stop after 5 consecutive pages with nothing in the
  window; without and with its 0.5 s sleep per page;
* **this project**: ``airflow dags test crawl_<id> <ref>`` as a subprocess on a one-task config; wall time,
  crawl span from ``crawler_ops.crawl_run``, Airflow overhead, peak RSS, per-task timings from Airflow's log
  lines, each chunk's records/s from its return value (XCom), and the topic's keys checked against the
  source's ground truth;
* with ``--scheduler``, also the DAG on a real scheduler + LocalExecutor (own api-server, scheduler and
  dag-processor on a private metadata DB), triggered with ``airflow dags trigger``.

Examples::

    .venv/bin/python bench/crawl_bench.py                              # 200 000 records, batch 1000
    .venv/bin/python bench/crawl_bench.py --total 20000
    .venv/bin/python bench/crawl_bench.py --totals 10000,100000,1000000 --skip-old-sleep
    .venv/bin/python bench/crawl_bench.py --total 200000 --skip-old-sleep --scheduler

The stack must be up (``.venv/bin/python dev/stack.py up``); its environment is read through
``dev/stack.py`` from ``.stack/stack.json`` (or ``$CRAWLER_OPS_STACK_DIR/stack.json``), with this
checkout's ``dags/`` and ``plugins/``. Topics and data sets are unique per run; the topics are deleted when the run
ends (``CRAWLBENCH_KEEP_TOPICS=1`` keeps them), the source's data sets are not. Results: markdown on stdout, JSON in
``bench/results/<timestamp>.json``, each ``dags test`` log in ``bench/results/<timestamp>/``.
Exit status 1 when a correctness check fails, 2 when the stack is not usable.

The parts live in ``bench/crawlbench/`` (see its ``__init__``); this file runs them in order.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crawlbench.common import REF, RESULTS_DIR, SOURCE_MAX_LIMIT, BenchError
from crawlbench.cores import source_on_own_core
from crawlbench.environment import Stack, load_stack
from crawlbench.limits import (
    fetch_window_pages,
    measure_components,
    measure_drain,
    measure_in_flight,
    measure_sink,
)
from crawlbench.old_algorithm import OLD_SLEEP_S, measure_old
from crawlbench.project import in_flight, run_project
from crawlbench.report import header_text, render, write_json
from crawlbench.results import Suite, Variant, crawl_span_variant
from crawlbench.scheduler import run_scheduler_variant
from crawlbench.source import Dataset, SourceAdmin, dataset_name
from crawlbench.topics import create_topic


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
        help="run dags test on the stack's own metadata DB instead of a private one",
    )
    parser.add_argument(
        "--latencies",
        default="0",
        help="comma-separated ms the source adds to every request, one suite each for --total (default 0)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run each dags test under py-spy and report the top of the chunk's profile",
    )
    parser.add_argument(
        "--pin-source",
        action="store_true",
        help="the demo source on a core of its own, the crawler on the others (the crawler's own ceiling)",
    )
    parser.add_argument("--scheduler", action="store_true", help="also run the DAG under a real scheduler (optional)")
    parser.add_argument(
        "--scheduler-latency", type=float, default=None, help="latency of the scheduler variant (default: the first)"
    )
    parser.add_argument(
        "--incremental-records",
        type=int,
        default=1000,
        help="with --scheduler: records appended for a second, incremental run (0: none; default 1000)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.batch_size <= SOURCE_MAX_LIMIT:
        parser.error(f"--batch-size must be within [1, {SOURCE_MAX_LIMIT}] (the demo source's page limit)")
    if not 0.0 < args.share <= 1.0:
        parser.error("--share must be within (0, 1]")
    args.latency_list = parse_latencies(parser, args.latencies)
    args.total_list = (
        [args.total, *(t for t in parse_totals(parser, args.totals) if t != args.total)]
        if args.totals
        else [args.total]
    )
    if any(t < args.batch_size for t in args.total_list):
        parser.error("every total must be at least --batch-size")
    if args.scheduler_latency is None:
        args.scheduler_latency = args.latency_list[0]
    return args


def parse_latencies(parser: argparse.ArgumentParser, text: str) -> list[float]:
    """``0,50`` -> ``[0.0, 50.0]``: milliseconds, at most a minute (the demo source's limit)."""
    try:
        latencies = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--latencies takes comma-separated milliseconds, got {text!r}")
    if not latencies or not all(0 <= ms <= 60_000 for ms in latencies):
        parser.error("--latencies needs milliseconds within [0, 60000]")
    return latencies


def parse_totals(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """``10000,100000`` -> ``[10000, 100000]``; exits with a usage error otherwise."""
    try:
        totals = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--totals takes comma-separated integers, got {text!r}")
    if not totals or min(totals) < 1:
        parser.error("--totals needs positive integers")
    return totals


def plan_suites(args: argparse.Namespace) -> list[tuple[int, float]]:
    """(total, latency) of each suite: ``--total`` at each of ``--latencies``, then the other ``--totals`` at the
    first latency (how the figures grow with the total)."""
    first = args.latency_list[0]
    return [(args.total, ms) for ms in args.latency_list] + [(t, first) for t in args.total_list[1:]]


def run_suite(
    stack: Stack,
    args: argparse.Namespace,
    total: int,
    latency_ms: float,
    base: Suite | None,
    out_dir: Path,
    say: Callable[[str], None],
) -> Suite:
    """All variants for one total and one source latency, in a fixed order, on one fresh data set.

    The source drain, the sink limit and the per-page costs do not depend on the latency: they are measured with
    none (the source's and the sink's own bounds), and a suite with a ``base`` (the same total at the first
    latency) reuses them instead of measuring them again.
    """
    admin = SourceAdmin(stack.source_url)
    ds = admin.create(dataset_name(), total, args.share, args.batch_size)
    say(f"data set {ds.name}: total={total} in_window={ds.in_window} batch={ds.batch} latency={latency_ms:g} ms")
    scratch = f"{ds.name}.warmup"
    create_topic(stack.bootstrap, scratch)
    if base is None:  # measured before the latency is set: one request at a time at 200 ms is no bound on the crawl
        variants, components = limit_variants(stack, ds, args, scratch, say)
    else:
        variants, components = reused_limits(base), base.components
    if latency_ms:
        admin.set_latency(ds.name, latency_ms)
    flight = in_flight(args)
    say(f"source with {flight} pages in flight ...")
    variants.append(measure_in_flight(stack.source_url, ds, flight))
    say("old algorithm, no sleep ...")
    variants.append(measure_old(stack, admin, ds, 0.0, scratch))
    if not args.skip_old_sleep:
        say(f"old algorithm, {OLD_SLEEP_S} s sleep ...")
        variants.append(measure_old(stack, admin, ds, OLD_SLEEP_S, scratch))
    say("project: airflow dags test ...")
    project = run_project(stack, admin, ds, args, out_dir)
    variants += [project, crawl_span_variant(project)]
    if args.profile and base is None and total == args.total:
        say("project under py-spy (a second first crawl, on a copy of the data set; timed figures come from above) ...")
        twin = admin.create(dataset_name(), total, args.share, args.batch_size)
        if latency_ms:
            admin.set_latency(twin.name, latency_ms)
        project.details["profile"] = run_project(stack, admin, twin, args, out_dir, profile=True).details["profile"]
    scheduler: dict[str, Any] = {}
    if args.scheduler and total == args.total and latency_ms == args.scheduler_latency:
        say("project: real scheduler + LocalExecutor (api-server, scheduler, dag-processor on a private DB) ...")
        variant = run_scheduler_variant(stack, args, total, out_dir, latency_ms)
        variants += [variant, crawl_span_variant(variant, "project: scheduler crawl span (PG)")]
        scheduler = variant.details
    return Suite(
        dataset={"name": ds.name, "total": total, "in_window": ds.in_window, "batch": ds.batch, "share": ds.share},
        variants=variants,
        project=project.details,
        components=components,
        problems=check_suite(ds, variants, project),
        scheduler=scheduler,
        latency_ms=latency_ms,
        in_flight=flight,
    )


def reused_limits(base: Suite) -> list[Variant]:
    """The base suite's source drain and sink limit, named as measured there."""
    note = f" [{base.latency_ms:g} ms suite]"
    return [replace(v, name=v.name + note) for v in base.variants if v.name.startswith(("source drain", "sink limit"))]


def limit_variants(
    stack: Stack, ds: Dataset, args: argparse.Namespace, scratch: str, say: Callable[[str], None]
) -> tuple[list[Variant], dict[str, float]]:
    """The source drain, the sink limit, and the per-page costs measured on the sink's pages."""
    say("source drain ...")
    drain = measure_drain(stack.source_url, ds, args.drain_passes)
    say("sink limit ...")
    pages = fetch_window_pages(stack.source_url, ds)
    sink = measure_sink(stack, ds, pages, scratch)
    return [drain, sink], measure_components(stack, ds, pages, scratch)


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


def say(message: str) -> None:
    """Progress on stderr, so stdout is the report alone."""
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every variant for each total, print the tables, write the JSON; 1 when a check failed."""
    args = parse_args(argv)
    try:
        stack = load_stack()
        load_before = os.getloadavg()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out_dir = RESULTS_DIR / stamp
        suites: list[Suite] = []
        with source_on_own_core(args.pin_source) as pinned:
            for total, latency_ms in plan_suites(args):
                base = next((x for x in suites if x.dataset["total"] == total), None)
                suites.append(run_suite(stack, args, total, latency_ms, base, out_dir, say))
    except BenchError as exc:
        print(f"crawl_bench: error: {exc}", file=sys.stderr)
        return 2
    markdown = render(suites, "\n".join(filter(None, [header_text(stack, load_before), pinned])))
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
