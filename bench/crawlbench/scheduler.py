"""The crawl DAG on a real scheduler with LocalExecutor: an api-server, a scheduler and a dag-processor
started by ``dev/stack.py``'s helpers on a private metadata DB, one triggered run."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stdout, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crawlbench.common import REPO, BenchError
from crawlbench.environment import Stack, airflow_command, airflow_env, devstack, metadata_db
from crawlbench.metadata import add_chunk_figures, chunk_results, dag_run, metadata_rows, run_times, task_instances
from crawlbench.project import crawl_seconds, read_run_record, write_config
from crawlbench.results import Variant
from crawlbench.sampling import TreeMemory
from crawlbench.source import Dataset, RequestLog, SourceAdmin, dataset_name
from crawlbench.topics import check_topic

SERVICES = ("api-server", "scheduler", "dag-processor")
SERVICE_STARTUP_S = 240.0
RUN_TIMEOUT_S = 1800.0
TERMINAL_STATES = ("success", "failed")


@dataclass
class Services:
    """Airflow services this benchmark started: their environment and pids, by service."""

    env: dict[str, str]
    pids: dict[str, int]
    log_dir: Path
    port: int = 0


@contextmanager
def scheduler_services(
    stack: Stack, config_path: Path, log_dir: Path, extra_env: Mapping[str, str] | None = None
) -> Iterator[Services]:
    """api-server + scheduler (LocalExecutor) + dag-processor on a private metadata DB,
    parsing only the benchmark's config (``extra_env`` added to their environment); all three are stopped (by
    pid) on exit, their task logs kept."""
    with airflow_env(stack, shared=False) as env:
        port = devstack.free_port()
        env.update(
            CRAWLER_OPS_CONFIG=str(config_path),
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        )
        env.update(extra_env or {})
        services = Services(env, {}, log_dir, port)
        try:
            for service in SERVICES:
                command = [devstack.airflow_cli(), *devstack.airflow_service_args(service, port)]
                services.pids[service] = devstack.spawn(service, command, env, REPO, logs=log_dir, run=log_dir)
            wait_for_api_server(services, f"http://127.0.0.1:{port}")
            yield services
        finally:
            stop_services(services)
            with suppress(OSError):
                shutil.copytree(env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"], log_dir / "task_logs", dirs_exist_ok=True)


def stop_services(services: Services) -> None:
    """Stop each service's process group, the last started first (dev/stack.py's notes go to stderr)."""
    with redirect_stdout(sys.stderr):
        for service, pid in reversed(services.pids.items()):
            devstack.stop_pid(service, pid, run=services.log_dir)


def wait_for_api_server(services: Services, url: str) -> None:
    """Until the api-server answers; fails with the log's tail when a service exits early."""

    def ready() -> bool:
        check_alive(services)
        return bool(devstack.airflow_healthy(url))

    try:
        devstack.wait_until("api-server", services.pids["api-server"], ready, SERVICE_STARTUP_S, services.log_dir)
    except devstack.StackError as exc:
        raise BenchError(f"airflow {exc}") from exc


def check_alive(services: Services) -> None:
    """Raise BenchError naming the service (and its log) that exited."""
    for name, pid in services.pids.items():
        if not devstack.pid_alive(pid):
            tail = devstack.log_tail(name, 15, logs=services.log_dir)
            raise BenchError(f"airflow {name} exited; {services.log_dir / name}.log:\n{tail}")


def wait_for_dag(env: dict[str, str], dag_id: str, timeout: float = SERVICE_STARTUP_S) -> None:
    """Until the dag-processor has serialised ``dag_id``; unpause it if it was created paused."""
    deadline = time.monotonic() + timeout
    query = (
        "SELECT d.is_paused FROM dag d JOIN serialized_dag s ON s.dag_id = d.dag_id "
        "WHERE d.dag_id = :dag AND NOT d.is_stale"
    )
    while time.monotonic() < deadline:
        rows = metadata_rows(metadata_db(env), query, dag=dag_id)
        if rows:
            if rows[0][0]:
                subprocess.run(
                    [*airflow_command(), "dags", "unpause", dag_id], env=env, capture_output=True, check=True
                )
            return
        time.sleep(0.5)
    raise BenchError(f"the dag-processor did not register {dag_id} within {timeout:.0f}s")


def trigger_and_wait(services: Services, dag_id: str) -> tuple[dict[str, Any], TreeMemory]:
    """``airflow dags trigger`` (no logical date: the run's reference is its run_after) and poll the run
    until it finishes, sampling the scheduler tree's memory."""
    env, db = services.env, metadata_db(services.env)
    memory = TreeMemory(services.pids["scheduler"])
    started = time.perf_counter()
    trigger = subprocess.run([*airflow_command(), "dags", "trigger", dag_id], env=env, capture_output=True, text=True)
    trigger_s = time.perf_counter() - started
    if trigger.returncode != 0:
        raise BenchError(f"airflow dags trigger {dag_id} failed: {trigger.stderr[-1500:]}")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        memory.sample()
        run = dag_run(db, dag_id)
        if run and run[0] in TERMINAL_STATES:
            state, queued, start, end = run
            wall = time.perf_counter() - started
            return {"state": state, "trigger_cli_s": trigger_s, "wall_s": wall, **run_times(queued, start, end)}, memory
        time.sleep(0.05)
    raise BenchError(f"{dag_id}: the triggered run did not finish within {RUN_TIMEOUT_S:.0f}s")


def scheduled_run(services: Services, admin: SourceAdmin, ds: Dataset, latency_ms: float) -> dict[str, Any]:
    """Create the data set around "now", trigger the DAG and wait; the run, the task instances with the
    chunks' records/s (from their return values) and the scheduler tree's memory."""
    dag_id = f"crawl_{ds.name}"
    wait_for_dag(services.env, dag_id)
    now = datetime.now(UTC).replace(microsecond=0)
    admin.create(ds.name, ds.total, ds.share, ds.batch, ref=now)
    admin.set_latency(ds.name, latency_ms)
    return measured_run(services, dag_id)


def measured_run(services: Services, dag_id: str) -> dict[str, Any]:
    """Trigger the DAG, wait for the run; its times, task instances and the scheduler tree's memory."""
    run, memory = trigger_and_wait(services, dag_id)
    db = metadata_db(services.env)
    tis = task_instances(db, dag_id, memory)
    add_chunk_figures(tis, chunk_results(db, dag_id), names=("records_per_s", "elapsed_s"))
    # The sum over the tree double-counts the pages forked workers share with the scheduler.
    return {"run": run, "task_instances": tis, "scheduler_tree_rss_sum_mb": memory.peak_total / 2**20}


def incremental_run(services: Services, admin: SourceAdmin, ds: Dataset, records: int) -> dict[str, Any]:
    """A small incremental run after the first: ``records`` new records appended, the DAG triggered again."""
    admin.clear_requests(ds.name)
    admin.append(ds.name, records)
    measured = measured_run(services, f"crawl_{ds.name}")
    record = read_run_record_of(services, ds)
    measured.update(
        appended=records,
        run_status=record["status"],
        mode=record["mode"],
        published=int(record["published"]),
        crawl_s=crawl_seconds(record),
        pages=admin.requests(ds.name).pages,
    )
    return measured


def read_run_record_of(services: Services, ds: Dataset) -> dict[str, Any]:
    return read_run_record(services.env["CRAWLER_OPS_PG_URI"], ds.name)


def run_scheduler_variant(
    stack: Stack, args: argparse.Namespace, total: int, out_dir: Path, latency_ms: float = 0.0
) -> Variant:
    """The crawl DAG triggered on a real scheduler with LocalExecutor (each task in its own process): a first
    crawl with the source answering ``latency_ms`` later per request, then (``--incremental-records``) a small
    incremental run.

    ``dags trigger`` gives a schedule-less DAG no data interval of its own: its reference is the trigger
    time (data_interval_end = run_after), so the data set is created around "now" just before the trigger
    and checked against the truth at the run's recorded ``ref_time``.
    """
    admin = SourceAdmin(stack.source_url)
    ds = Dataset(dataset_name(), total, args.share, args.batch_size, frozenset())
    topic = f"{ds.name}.scheduler"
    log_dir = out_dir / f"{ds.name}.scheduler"
    log_dir.mkdir(parents=True, exist_ok=True)
    config_path = write_config(ds, topic, args, out_dir)
    with scheduler_services(stack, config_path, log_dir) as services:
        measured = scheduled_run(services, admin, ds, latency_ms)
        record = read_run_record(stack.pg_uri, ds.name)
        requests = admin.requests(ds.name)
        incremental = incremental_run(services, admin, ds, args.incremental_records) if args.incremental_records else {}
    details = {
        "dataset": ds.name,
        "ref_time": record["ref_time"].isoformat(),
        "run": measured["run"],
        "crawl_s": crawl_seconds(record),
        "run_status": record["status"],
        "task_instances": measured["task_instances"],
        "scheduler_tree_rss_sum_mb": measured["scheduler_tree_rss_sum_mb"],
        "logs": str(log_dir),
        "latency_ms": latency_ms,
        "incremental": incremental,
    }
    return scheduler_variant(stack, admin, topic, record, details, requests)


def scheduler_variant(
    stack: Stack,
    admin: SourceAdmin,
    topic: str,
    record: Mapping[str, Any],
    details: dict[str, Any],
    requests: RequestLog,
) -> Variant:
    """The scheduler run's row: trigger to run finished, keys checked against the truth at its ``ref_time``."""
    wall = details["run"]["wall_s"]
    return Variant(
        name="project: scheduler + LocalExecutor (trigger→done)",
        wall_s=wall,
        pages=int(record["pages"]),
        fetched=int(record["fetched"]),
        kept=int(record["kept"]),
        published=int(record["published"]),
        rate=int(record["fetched"]) / wall,
        requests=requests,
        keys=check_topic(stack.bootstrap, topic, admin.truth(details["dataset"], record["ref_time"])),
        details=details,
    )
