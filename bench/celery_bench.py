"""The same first crawl on 1 and on 2 Celery workers: records/s of the crawl span and the ratio, with the demo
source answering each page after ``--latency-ms`` (a remote source), so the chunks running side by side, not the
CPU, decide the speed. Each worker runs 2 task instances at once (``dev/celery_stack.py``), so one worker crawls
2 chunks at a time and two workers 4.

    .venv/bin/python bench/celery_bench.py [--total 100000] [--batch 100] [--latency-ms 50] [--workers 1,2]

Needs the stack (``dev/stack.py up``); it takes over the stack's Airflow (``dev/stack.py airflow-up --executor
celery --workers N`` for each N) and stops it at the end. Every run's topic is checked against the source's
ground truth. On a shared machine compare the ratio, not the absolute figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

from crawlbench import environment
from crawlbench.common import BenchError
from crawlbench.source import SourceAdmin, dataset_name
from crawlbench.topics import check_topic

REPO = Path(__file__).resolve().parent.parent
STACK_PY = [sys.executable, str(REPO / "dev" / "stack.py")]
RUN_TIMEOUT_S = 900


def task_entry(name: str, batch: int, chunks: int) -> dict[str, Any]:
    """A first crawl in ``chunks`` chunks, all allowed to run at once, each reading one page at a time."""
    return {
        "id": name,
        "kafka": {"topic": f"bench.{name}", "partitions": 4},
        "batch_size": batch,
        "max_chunks": chunks,
        "min_batches_per_chunk": 1,
        "max_parallel_chunks": chunks,
        "source": {"concurrency": 1, "requests_per_s": None, "max_in_flight": None},
        "schedule": None,
        "paused": True,
    }


def airflow_api() -> httpx.Client:
    state = json.loads(Path(environment.devstack.STATE_FILE).read_text())["airflow"]
    user, password = state["login"]
    token = httpx.post(f"{state['url']}/auth/token", json={"username": user, "password": password}, timeout=60)
    token.raise_for_status()
    headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
    return httpx.Client(base_url=f"{state['url']}/api/v2", headers=headers, timeout=60)


def wait_for_dag(api: httpx.Client, dag_id: str) -> None:
    deadline = time.monotonic() + 180
    while api.get(f"/dags/{dag_id}").status_code != httpx.codes.OK:
        if time.monotonic() > deadline:
            raise BenchError(f"the dag-processor did not register {dag_id}")
        time.sleep(1)
    api.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()


def run_and_wait(api: httpx.Client, dag_id: str) -> str:
    answer = api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
    answer.raise_for_status()
    run_id = str(answer.json()["dag_run_id"])
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (state := api.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()["state"]) not in ("success", "failed"):
        if time.monotonic() > deadline:
            raise BenchError(f"{dag_id}: the run did not finish within {RUN_TIMEOUT_S}s")
        time.sleep(0.5)
    if state != "success":
        raise BenchError(f"{dag_id}: run {run_id} {state}; see the stack's task logs")
    return run_id


def crawl_span(pg_uri: str, task: str, run_id: str) -> tuple[int, float]:
    """Records fetched and seconds between the run record's start and finish."""
    with psycopg.connect(pg_uri) as conn:
        row = conn.execute(
            "SELECT fetched, extract(epoch FROM finished_at - started_at) FROM crawler_ops.crawl_run "
            "WHERE task_id = %s AND run_id = %s",
            (task, run_id),
        ).fetchone()
    if row is None:
        raise BenchError(f"no run record for {task} {run_id}")
    return int(row[0]), float(row[1])


def measure(stack: environment.Stack, workers: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    name = dataset_name()
    admin = SourceAdmin(stack.source_url)
    admin.create(name, args.total, 1.0, args.batch, ref=datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1))
    admin.set_latency(name, args.latency_ms)
    config = folder / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"tasks": [task_entry(name, args.batch, args.chunks)]}))
    env = {**stack.env, "CRAWLER_OPS_CONFIG": str(config)}
    subprocess.run([*STACK_PY, "airflow-up", "--executor", "celery", "--workers", str(workers)], env=env, check=True)
    api = airflow_api()
    wait_for_dag(api, f"crawl_{name}")
    started = time.perf_counter()
    run_id = run_and_wait(api, f"crawl_{name}")
    wall = time.perf_counter() - started
    fetched, span = crawl_span(stack.pg_uri, name, run_id)
    # The run's window ends at its reference time, its run_after: the truth is read there.
    ref = datetime.fromisoformat(api.get(f"/dags/crawl_{name}/dagRuns/{run_id}").json()["run_after"])
    check = check_topic(stack.bootstrap, f"bench.{name}", admin.truth(name, ref))
    return {
        "workers": workers,
        "fetched": fetched,
        "span_s": span,
        "records_per_s": fetched / span,
        "wall_s": wall,
        "keys": check.short(),
        "ok": check.ok,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total", type=int, default=100_000, help="records, all in the window (default 100000)")
    parser.add_argument("--batch", type=int, default=100, help="records per page (default 100)")
    parser.add_argument("--chunks", type=int, default=8, help="chunks of the first crawl (default 8)")
    parser.add_argument("--latency-ms", type=float, default=50, help="the source's latency per request (default 50)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    stack = environment.load_stack()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="celery_bench_") as folder:
            for workers in (int(n) for n in args.workers.split(",")):
                rows.append(measure(stack, workers, args, Path(folder)))
    finally:
        subprocess.run([*STACK_PY, "airflow-down"], env=stack.env, check=False, capture_output=True)
    base = rows[0]["records_per_s"]
    print(
        f"\nFirst crawl of {args.total:,} records in {args.chunks} chunks, pages of {args.batch}, "
        f"source latency {args.latency_ms:g} ms, 2 task slots per worker\n"
    )
    print("| Celery workers | crawl span s | records/s | × first row | dags run wall s | topic keys = truth |")
    print("|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['workers']} | {r['span_s']:.1f} | {r['records_per_s']:,.0f} | {r['records_per_s'] / base:.2f} "
            f"| {r['wall_s']:.1f} | {r['keys']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"celery_bench: {exc}", file=sys.stderr)
        sys.exit(2)
