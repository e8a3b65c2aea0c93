"""Chaos scenarios on the local stack, through the real scheduler: faults injected while crawl runs go on, then
every topic counted against the demo source's ground truth. Bounded, stops by itself, touches only loopback
addresses.

Each scenario crawls fresh data sets, one task per delivery mode (``at_least_once``, ``exactly_once``) at the same
time, on a private Airflow (api-server, scheduler, dag-processor, LocalExecutor on a private metadata DB on
the stack's PostgreSQL). Failed chunk tries are retried by Airflow (``retries`` 30, ``retry_delay_s`` 3): that is the
recovery measured. Scenarios:

* ``chunk_kills``: SIGKILLs of ``crawl_chunk`` task processes (20 per mode, spread over 3 runs, each at a random
  moment after the try finished a batch);
* ``broker_outage``: a private single Kafka broker SIGKILLed mid-run, restarted 60 s later;
* ``cluster_broker``: one broker of a private 3-broker cluster (replication 3) SIGKILLed mid-run;
* ``postgres_outage``: a private crawler PostgreSQL SIGKILLed mid-run (postmaster and backends), restarted 30 s later;
* ``source_faults``: the source answers 10 % of requests 503, with 3 s bursts of 429 (Retry-After 1 s) every 10 s;
* ``airflow_restart``: the private api-server and scheduler stopped mid-run and started again;
* ``celery_worker``: skipped until a Celery stack exists.

The shared stack's Kafka and PostgreSQL are only read and written like any test does; the services the
scenarios break are private (free loopback ports, temporary folders) and stopped at the end.

    .venv/bin/python bench/chaos.py                                  # every scenario, both modes (~30 min)
    .venv/bin/python bench/chaos.py --quick                          # fewer kills, shorter outages
    .venv/bin/python bench/chaos.py --scenarios chunk_kills,broker_outage --kills 1 --broker-down-s 10

Prints a markdown table; writes ``bench/results/chaos-<timestamp>-<pid>.json`` and the Airflow logs to
``bench/results/chaos-<timestamp>-<pid>/``. Exit status 0 when every target is met, 1 when one is missed (listed on
stderr), 2 when the stack is not usable.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from crawlbench.chaos.flights import MODES, Shape
from crawlbench.chaos.lab import Lab, Settings
from crawlbench.chaos.report import render, write_json
from crawlbench.chaos.run import run_all
from crawlbench.chaos.scenarios import scenarios
from crawlbench.common import RESULTS_DIR, BenchError
from crawlbench.environment import load_stack

QUICK = {"kills": 5, "kill_rounds": 1, "broker_down_s": 20.0, "pg_down_s": 10.0, "total": 4_000}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = list(scenarios(1))
    parser.add_argument("--scenarios", default=",".join(names), help=f"comma-separated, of: {', '.join(names)}")
    parser.add_argument("--modes", default=",".join(MODES), help="delivery modes (default both)")
    parser.add_argument("--quick", action="store_true", help="5 kills in 1 run, 20 s / 10 s outages, 4000 records")
    parser.add_argument("--kills", type=int, default=20, help="chunk SIGKILLs per mode (default 20)")
    parser.add_argument("--kill-rounds", type=int, default=3, help="runs the kills are spread over (default 3)")
    parser.add_argument("--broker-down-s", type=float, default=60.0, help="broker outage (default 60)")
    parser.add_argument("--pg-down-s", type=float, default=30.0, help="PostgreSQL outage (default 30)")
    parser.add_argument("--total", type=int, default=Shape.total, help=f"records per data set (default {Shape.total})")
    parser.add_argument("--max-minutes", type=float, default=45.0, help="stop waiting after this (default 45)")
    parser.add_argument("--seed", type=int, default=15, help="seed of the kill moments and the broker choice")
    parser.add_argument("--json", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
    args.scenario_list = [s for s in args.scenarios.split(",") if s]
    args.mode_list = tuple(m for m in args.modes.split(",") if m)
    if unknown := set(args.scenario_list) - set(names):
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {names}")
    if not args.mode_list or set(args.mode_list) - set(MODES):
        parser.error(f"--modes takes {', '.join(MODES)}")
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        kills=args.kills,
        kill_rounds=args.kill_rounds,
        broker_down_s=args.broker_down_s,
        pg_down_s=args.pg_down_s,
        modes=args.mode_list,
        shape=Shape(total=args.total),
        seed=args.seed,
    )


def say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # The process id keeps two runs started in the same second (two test workers) out of each other's folder.
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    out_dir = RESULTS_DIR / f"chaos-{stamp}"
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="crawler_chaos_"))
    lab: Lab | None = None
    try:
        lab = Lab(load_stack(), settings_from(args), home, started + args.max_minutes * 60, say)
        rows = run_all(lab, args.scenario_list, out_dir)
    except BenchError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    finally:
        if lab is not None and lab.pg is not None:
            lab.pg.remove()  # run as root its data lives outside ``home``
        shutil.rmtree(home, ignore_errors=True)
    minutes = (time.monotonic() - started) / 60
    print(render(rows))
    print(f"\n{len(rows)} rows in {minutes:.1f} min; logs in {out_dir}")
    write_json(args.json or RESULTS_DIR / f"chaos-{stamp}.json", rows, {"argv": sys.argv, "minutes": minutes})
    misses = [miss for row in rows for miss in row.misses()]
    for miss in misses:
        print(f"TARGET MISSED: {miss}", file=sys.stderr)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
