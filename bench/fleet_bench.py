"""A fleet of crawl tasks on one source connection, scheduled by a real Airflow scheduler (a team replacing the old
service, in its shape: one API and a task per city), on a cron or watching its source: does every tick get its run,
does every watch ask on time, how late are the changes crawled, do the runs all finish, is every topic exact, and what
does Airflow's CPU cost per run and per poll against the old service's poll.

    .venv/bin/python bench/fleet_bench.py [--tasks 100] [--cron '*/2 * * * *'|none] [--watch-every S]
        [--records 300] [--new-share 0.2] [--append-every 20] [--minutes 14] [--drain 4] [--idle-phase-minutes 4]
        [--caught-up] [--executor local|celery] [--workers 2] [--json out.json]
    .venv/bin/python bench/fleet_bench.py --short     # 20 tasks, 3 min, 1 min drain, 1.5 min idle (make bench)
    .venv/bin/python bench/fleet_bench.py --tasks 20 --watch-every 20 --cron none --minutes 3 --drain 2
    .venv/bin/python bench/fleet_bench.py --tasks 1000 --caught-up --watch-every 300 --cron none --new-share 0.01 \
        --append-every 300 --minutes 30

What one run does, in order:

1. ``--tasks`` demo-source data sets of ``--records`` records, all within the 7 days before a reference a minute ago,
   and as many crawl tasks (``crawl_<data set>``), all on the default source connection ``demo_source`` with the
   default source settings (its pool ``crawler_source_demo_source``, rate limit and in-flight bound are what is
   measured), each with its own topic; schedule ``--cron`` (UTC), created paused. With ``--watch-every`` S every
   task also has ``watch: {every_s: S, refire_s: max(600, 4 S)}``: its DAG is scheduled on its watch Asset, whose
   trigger in Airflow's triggerer asks the source's count every S s, with the cron beside it as a safety net, or
   alone with ``--cron none`` (or ``''``).
2. Airflow on a private metadata DB: LocalExecutor (api-server, scheduler, dag-processor and a
   triggerer, all children of this process) or ``--executor celery`` (``dev/stack.py airflow-up --executor celery
   --workers N``, which starts a triggerer too). Once every DAG is registered, the old loop's idle poll is timed
   (below), and the fleet is unpaused in one REST request: that moment is t0. A watched fleet first warms up: its
   DAGs parsed again (the dag-processor writes the watch triggers only for unpaused DAGs), every watch running in
   the triggerer, and the first crawls the watches announce (each data set is new) finished; t0 is then.

   ``--caught-up``: once every DAG is registered and before the unpause, every task's progress is set to its
   source's total with the project's own ``crawler-ops import-progress`` (:func:`import_caught_up`), as after a
   migration from the old service with every task caught up. No task then makes a full first crawl before the window
   (the first crawls of a thousand tasks take the whole machine for long): on a cron a tick's run finds nothing
   unless its data set got appends; watched, no watch announces anything until its source moves, so the warm-up is
   only until every watch runs in the triggerer and has asked its source once since the unpause (the data set's
   count requests grew by more than its task's plans since then); t0 is then. The topics hold only what was crawled
   after the import (step 6).
3. For ``--minutes`` M: every ``--append-every`` s, 5-20 new records appended to ``round(--new-share x N)`` data sets
   drawn at random (``--seed``), each append noted with the total it made; every 5 s the load average, the machine's
   CPU busy share, the task instances of each pool by state and the runs by state are sampled.
4. At t0 + M the schedule is switched off (the config written with ``schedule`` null and no ``watch``, parsed again:
   a paused DAG's runs would never finish; the watched DAGs no longer reference their Assets, so their watch
   triggers are deleted and the triggerer cancels them; the benchmark waits until no watch trigger row is left, see
   :mod:`crawlbench.fleet.services`), and the runs drain: until none is queued or running, at most ``--drain``
   minutes.
5. The figures, from the metadata DB and the crawler's run records (:mod:`crawlbench.fleet.runs`): cron ticks in
   ``[t0, t0 + M)`` summed over the DAGs, the scheduled runs created for them (with a watch, the asset-triggered
   runs too), their states after the drain, start lag, duration, task instances per run, and the runs whose plan
   found nothing new (``planned`` = 0). The machine's CPU busy share over the window, from ``/proc/stat``
   (:mod:`crawlbench.fleet.machine`). Change lag (:mod:`crawlbench.fleet.watch`): for every append, the time until
   the first plan of its task that counted a total covering it recorded its run (``crawler_ops.crawl_run``:
   ``started_at``, just after the plan's count, and ``total``: exact about what the plan saw, where Airflow's run start
   is not); p50/p95/max, and with a watch the share crawled within S + 30 s, of the appends made at least that long
   before the window's end. With a watch: polls due (tasks x window / S) against polls made (the count requests the
   demo source answered for the fleet's data sets in the window, from its per-task counters, less one per plan
   recorded in it); runs per change (the runs created over the distinct (task, total) the watches announced in the
   window, their Asset events; repeats counted apart) and the idle runs (``planned`` = 0); the CPU per poll (the
   triggerer's, also over its own background, and all of Airflow's, in the window, over the polls made); and the
   polls made after the watches were gone, to the drained end (0 when switching off stopped them).
6. Every topic against the source's truth as far as its task has crawled (:mod:`crawlbench.fleet.topics`); a task
   that started caught up at watermark W0 must hold exactly the records at offsets W0 up to the total its last
   successful run counted (none below W0; nothing when no crawl came after the import).
7. Idle phase (``--idle-phase-minutes`` K > 0): every task's progress is set to its source's total with the project's
   own ``crawler-ops import-progress`` (as after a migration from the old service, all caught up), the schedule (and
   watch) is switched on again for K minutes with nothing appended, then off and drained to the end (at most 10
   minutes): every run of it is an idle poll, and with a watch every ask is one (the source never moves: a watch
   alone creates no run).
8. CPU (:mod:`crawlbench.fleet.cpu`): every process the benchmark started and their descendants (the Airflow
   services, the triggerer, executor workers, task processes), from the kernel's accounting, between t0 and the
   drained end of each phase; per run ended in the phase. The services' background (CPU per second with the schedule
   off and no run going, and the triggerer's alone) is read while the topics are checked (or for 30 s at the end,
   when runs were still going then), and the idle poll is also given over that background. The old service's idle
   poll is one count request of a keep-alive httpx client (``GET /api/{task}/count``, the total decoded),
   ``time.process_time()`` around each of 200, the median.

Targets (printed measured against goal). On a cron: every tick served (runs created = ticks due), start lag p95 ≤ 30
s, no run left queued or running after the drain, every topic exact, CPU per idle poll ≤ 10x the old count request,
the machine's CPU ≤ 50 % busy. With a watch: polls on time (made / due) ≥ 99 %, the machine's CPU ≤ 50 % busy, the
triggerer's CPU per poll ≤ 10x the old count request (of the idle phase when there is one: nothing but polls), every
topic exact, no run left after the drain. Exit status 1 when a topic is not exact (a correctness failure, also listed
on stderr), or with ``--strict`` when any target is not met; 2 when the benchmark could not run. Needs the stack
(``dev/stack.py up``). The machine is small and shared: compare ratios and medians, not absolute times; its busy
share counts every process on it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from crawlbench import environment
from crawlbench.common import RESULTS_DIR, BenchError
from crawlbench.fleet.cpu import CpuMeter, reap_orphans, tree_cpu
from crawlbench.fleet.fleet import Appender, Schedule, make_fleet, write_config
from crawlbench.fleet.phase import POOL, Bench, phase_result, stop_and_drain, warm_up
from crawlbench.fleet.report import markdown, targets
from crawlbench.fleet.sampler import Sampler
from crawlbench.fleet.services import (
    FleetAirflow,
    active_runs,
    celery_airflow,
    drain,
    local_airflow,
    unpause_fleet,
    wait_registered,
    wait_schedule,
)
from crawlbench.fleet.topics import check_fleet, source_total
from crawlbench.fleet.watch import poll_cpu
from crawlbench.source import SourceAdmin

BATCH = 100  # the config's default batch_size: the data sets' truth is read in pages of it
OLD_COUNT_REQUESTS = 200
IDLE_PREP_TIMEOUT_S = 600
QUIET_S = 30.0
FULL = {"tasks": 100, "minutes": 14.0, "drain": 4.0, "idle_phase_minutes": 4.0}
SHORT = {"tasks": 20, "minutes": 3.0, "drain": 1.0, "idle_phase_minutes": 1.5}
NO_CRON = ("none", "")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, help=f"crawl tasks and data sets (default {FULL['tasks']})")
    parser.add_argument(
        "--cron", default="*/2 * * * *", help="every task's schedule, UTC; none: no cron (with --watch-every only)"
    )
    parser.add_argument("--watch-every", type=float, help="watch every source, asking its count every S seconds")
    parser.add_argument("--records", type=int, default=300, help="records per data set at the start (default 300)")
    parser.add_argument("--new-share", type=float, default=0.2, help="share of data sets appended to (default 0.2)")
    parser.add_argument("--append-every", type=float, default=20, help="seconds between appends (default 20)")
    parser.add_argument("--minutes", type=float, help=f"the measured window (default {FULL['minutes']:g})")
    parser.add_argument("--drain", type=float, help=f"most minutes the runs drain (default {FULL['drain']:g})")
    parser.add_argument(
        "--idle-phase-minutes", type=float, help=f"idle phase, 0: none (default {FULL['idle_phase_minutes']:g})"
    )
    parser.add_argument(
        "--caught-up",
        action="store_true",
        help="before the unpause, set every task's progress to its source's total (import-progress): no first crawls",
    )
    parser.add_argument("--executor", choices=("local", "celery"), default="local")
    parser.add_argument("--workers", type=int, default=2, help="Celery workers (default 2)")
    parser.add_argument("--seed", type=int, default=47, help="seed of the appends (default 47)")
    parser.add_argument("--short", action="store_true", help=f"the short preset: {SHORT}")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any target is not met")
    args = parser.parse_args()
    for name, value in (SHORT if args.short else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.cron.strip().lower() in NO_CRON:
        args.cron = None
    if args.cron is None and args.watch_every is None:
        parser.error("--cron none leaves nothing to start a run: give --watch-every too")
    if args.watch_every is not None and args.watch_every < 5:
        parser.error("--watch-every: a watch asks every 5 s at the most often (the config's bound)")
    return args


def airflow_for(
    args: argparse.Namespace, stack: environment.Stack, config: Path, logs: Path
) -> AbstractContextManager[FleetAirflow]:
    if args.executor == "celery":
        return celery_airflow(stack, config, args.workers)
    # A triggerer on cron too, as every deployment runs one: a chunk that waits past source.defer_after_s resumes there.
    return local_airflow(stack, config, logs, triggerer=True)


def old_count_poll(source_url: str, name: str, requests: int = OLD_COUNT_REQUESTS) -> dict[str, Any]:
    """The old service's idle poll: one count request of a keep-alive httpx client, its total decoded; CPU of this
    process (``time.process_time``, no other thread running) and wall time per request, medians."""
    cpu, wall = [], []
    with httpx.Client(base_url=source_url, timeout=30) as client:
        for _ in range(10):
            client.get(f"/api/{name}/count").raise_for_status()
        for _ in range(requests):
            c0, w0 = time.process_time(), time.perf_counter()
            int(client.get(f"/api/{name}/count").json()["data"]["total"])
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    return {
        "requests": requests,
        "cpu_s_median": statistics.median(cpu),
        "cpu_s_mean": statistics.fmean(cpu),
        "wall_s_median": statistics.median(wall),
    }


def sleep_until(moment: float, appender: Appender | None = None) -> None:
    while (left := moment - time.time()) > 0:
        if appender is not None and appender.error is not None:
            raise BenchError(f"appending failed: {appender.error!r}")
        time.sleep(min(left, 1.0))


def main_phase(bench: Bench) -> dict[str, Any]:
    """Unpause the fleet (a watched one warmed up), append for ``--minutes``, stop it and drain; the phase's
    figures and its CPU."""
    before = bench.reading()
    unpause_fleet(bench.airflow, bench.fleet)
    t0, warmed = time.time(), {}
    if bench.watched:
        warmed = warm_up(bench, before)
        before = bench.reading()
        t0 = before.at
    end = t0 + bench.args.minutes * 60
    args = bench.args
    appender = Appender(bench.admin, bench.fleet, args.new_share, args.append_every, end, args.seed)
    appender.start()
    sleep_until(end, appender)
    appender.stop.set()
    appender.join()
    after = bench.reading()
    stopped = stop_and_drain(bench, args.drain)
    figures = phase_result(bench, before, after, t0, end, stopped, appender.appends.done)
    figures.update(warmed, t0=t0, end=end, appends=appender.appends)
    return figures


def import_caught_up(bench: Bench, stage: str) -> None:
    """Every task's progress set to its source's current total with ``crawler-ops import-progress --apply --force``
    (the old service's status format: ``last_start_offset`` becomes the watermark); its file and log in the results
    folder named after ``stage``."""
    with httpx.Client(base_url=bench.stack.source_url, timeout=60) as source:
        rows = [
            {"task_id": name, "total": (total := source_total(source, name)), "last_start_offset": total,
             "status": "completed", "filtered_count": 0, "produced_count": 0}
            for name in bench.fleet.names
        ]  # fmt: skip
    path = bench.folder / f"caught_up_{stage}.json"
    path.write_text(json.dumps(rows))
    command = [sys.executable, "-m", "crawler_ops", "import-progress", str(path), "--apply", "--force"]
    done = subprocess.run(command, env={**os.environ, **bench.airflow.env}, capture_output=True, text=True)
    log = bench.folder / f"import-progress_{stage}.log"
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise BenchError(f"import-progress failed ({log}):\n{done.stderr[-1500:]}")


def idle_phase(bench: Bench) -> dict[str, Any]:
    """Every task caught up, the schedule (and watch) on for ``--idle-phase-minutes`` with nothing appended, then off
    and drained: the figures of its runs, each an idle poll, of its watches' polls, and their CPU."""
    waited = drain(bench.airflow, bench.fleet, IDLE_PREP_TIMEOUT_S)
    if still := active_runs(bench.airflow, bench.fleet):
        return {"skipped": f"runs of the main phase still active after {waited:.0f} s more: {still}"}
    import_caught_up(bench, "idle")
    write_config(bench.config, bench.fleet, bench.schedule)
    on_s = wait_schedule(bench.airflow, bench.fleet, bench.schedule)
    before = bench.reading()
    end = before.at + bench.args.idle_phase_minutes * 60
    sleep_until(end)
    after = bench.reading()
    # Drained to the end (not --drain): the phase's CPU is divided by its runs, so each must have ended in it.
    stopped = stop_and_drain(bench, IDLE_PREP_TIMEOUT_S / 60)
    figures = phase_result(bench, before, after, before.at, end, stopped, [])
    figures.update(minutes=bench.args.idle_phase_minutes, extra_wait_s=waited, switch_on_s=on_s)
    figures.update(duration_phase_s=stopped[2].at - before.at)
    return figures


@contextmanager
def quiet_cpu(bench: Bench) -> Iterator[dict[str, Any]]:
    """Airflow's CPU per second while the body runs (in this process: the topic check) with the schedule off and no
    run going, at least :data:`QUIET_S`: its services' own background (the scheduler's loop, the dag-processor's
    parses, the api-server, the triggerer's loop with no watch). Yields the figures' dict, filled on exit;
    ``cpu_per_s`` None when a run was going."""
    figures: dict[str, Any] = {"cpu_per_s": None, "triggerer_per_s": None}
    quiet = not active_runs(bench.airflow, bench.fleet)
    triggerer = bench.airflow.triggerer
    cpu0, trig0, start = bench.meter.total(), tree_cpu(triggerer) if triggerer else 0.0, time.monotonic()
    yield figures
    time.sleep(max(0.0, QUIET_S - (time.monotonic() - start)))
    if quiet and not active_runs(bench.airflow, bench.fleet):
        seconds = time.monotonic() - start
        figures.update(seconds=seconds, cpu_per_s=(bench.meter.total() - cpu0) / seconds)
        if triggerer:
            figures["triggerer_per_s"] = (tree_cpu(triggerer) - trig0) / seconds


def run_fleet(bench: Bench, started: float) -> dict[str, Any]:
    """Registration (from ``started``, when the services were started), with ``--caught-up`` every task's progress
    imported, the old poll, the main phase, the topics, the idle phase, on a running Airflow."""
    stack, fleet = bench.stack, bench.fleet
    wait_registered(bench.airflow, fleet)
    result: dict[str, Any] = {"registration_s": time.time() - started}
    result["startup_cpu_s"] = bench.meter.total()
    if bench.caught_up:
        at = time.time()
        import_caught_up(bench, "start")
        result["caught_up"] = {"seconds": time.time() - at, "cpu_s": bench.meter.total() - result["startup_cpu_s"]}
    result["old_count"] = old_count_poll(stack.source_url, fleet.names[0])
    bench.sampler = sampler = Sampler(bench.airflow, fleet, bench.meter)
    sampler.start()
    try:
        main = main_phase(bench)
        appends = main.pop("appends")
        result["appends"] = {"count": len(appends.done), "records": appends.records}
        result["main"] = main
        with quiet_cpu(bench) as quiet:
            total, inexact = check_fleet(stack.source_url, stack.bootstrap, stack.pg_uri, fleet)
        result["quiet"] = quiet
        result["topic"] = {"summary": total.short(), "exact": total.exact, "sum": asdict(total), "inexact": inexact}
        if bench.args.idle_phase_minutes > 0:
            result["idle"] = idle_phase(bench)
        if result["quiet"]["cpu_per_s"] is None:  # runs were still going during the topic check: once more, now
            with quiet_cpu(bench) as quiet:
                pass
            result["quiet"] = quiet
    finally:
        sampler.stop.set()
        sampler.join()
    result["sampler_errors"] = sampler.errors[:10]
    result["samples"] = [asdict(s) for s in sampler.samples.taken]
    return result


def cpu_figures(result: dict[str, Any], all_s: float, floor_s: float) -> dict[str, Any]:
    main, idle, old = result["main"], result.get("idle") or {}, result["old_count"]
    idle_runs = idle.get("runs_ended")
    idle_per_run = idle["cpu_s"] / idle_runs if idle_runs else None
    quiet = result["quiet"]["cpu_per_s"]
    # What a poll adds over the services' background: the phase's CPU less the quiet rate over its duration.
    marginal = (idle["cpu_s"] - quiet * idle["duration_phase_s"]) / idle_runs if quiet and idle_runs else None
    return {
        "startup_s": result["startup_cpu_s"],
        "main_s": main["cpu_s"],
        "main_runs": main["runs_ended"],
        "main_per_run_s": main["cpu_s"] / main["runs_ended"] if main["runs_ended"] else None,
        "idle_s": idle.get("cpu_s"),
        "idle_runs": idle_runs,
        "idle_nothing_new": idle.get("nothing_new_ended"),
        "idle_per_run_s": idle_per_run,
        "old_count_cpu_s": old["cpu_s_median"],
        "idle_vs_old_count": idle_per_run / old["cpu_s_median"] if idle_per_run and old["cpu_s_median"] else None,
        "quiet_per_s": quiet,
        "idle_marginal_per_run_s": marginal,
        "idle_marginal_vs_old_count": marginal / old["cpu_s_median"] if marginal and old["cpu_s_median"] else None,
        "all_s": all_s,
        "sampled_floor_s": floor_s,
    }


def add_poll_cpu(result: dict[str, Any]) -> None:
    """Each watched phase's CPU per poll, now that the old count request and the triggerer's background are known."""
    old, trigger_quiet = result["old_count"]["cpu_s_median"], result["quiet"].get("triggerer_per_s")
    for phase in (result.get("main"), result.get("idle")):
        if phase and "watch" in phase:
            phase["watch"].update(poll_cpu(phase["watch"], old, trigger_quiet))


def results_folder() -> Path:
    """Where the run's config, service logs and import file go."""
    folder = RESULTS_DIR / f"fleet-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{os.getpid()}"
    (folder / "logs").mkdir(parents=True)
    return folder


def main() -> int:
    args = parse_args()
    stack = environment.load_stack()
    folder = results_folder()
    admin = SourceAdmin(stack.source_url)
    fleet = make_fleet(admin, args.tasks, args.records, BATCH)
    config = folder / "fleet.yaml"
    schedule = Schedule(args.cron, args.watch_every)
    write_config(config, fleet, schedule)
    meter = CpuMeter()
    started = time.time()
    with airflow_for(args, stack, config, folder / "logs") as airflow:
        meter.exclude |= airflow.not_airflow
        bench = Bench(args, stack, fleet, config, airflow, meter, admin, folder)
        result = run_fleet(bench, started)
    reap_orphans()
    result["cpu"] = cpu_figures(result, meter.total(), meter.sampled_floor())
    add_poll_cpu(result)
    result["pool"] = POOL
    result["scenario"] = {
        **{k: v for k, v in vars(args).items() if k != "json"},
        "schedule": schedule.describe(),
        "watch": schedule.watch,
        "append_every_s": args.append_every,
        "drain_minutes": args.drain,
        "cores": os.cpu_count(),
        "fleet": fleet.base,
        "results": str(folder),
    }
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    if not result["topic"]["exact"]:
        print(
            f"CORRECTNESS MISMATCH: {result['topic']['summary']}; tasks: {result['topic']['inexact']}", file=sys.stderr
        )
        return 1
    return 1 if args.strict and any(t.met is False for t in targets(result)) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"fleet_bench: {exc}", file=sys.stderr)
        sys.exit(2)
