"""Executor throughput: rows/s claimed and completed, this project (1 and 4 workers) against the old
one-row-at-a-time loop, same database, same run. Needs the local stack (`python dev/stack.py up`).

    .venv/bin/python bench/executor_bench.py [--rows 20000] [--claim-batch 20]

The old loop is reimplemented from the old design (shared/seeds/004): per row, an UPDATE ... RETURNING
claiming one row, a SELECT of its output fields, the user function, an UPDATE marking it done, each
committed, on one connection. Its SQL is built as the old code built it (its known defects do not change
its speed on a single-task table). The user function is trivial in every variant.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from crawlbench import environment
from crawlbench.common import BenchError

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "plugins"), str(REPO)]
SCHEMA = "bench_executor"


def trivial(row: dict[str, Any]) -> bool:
    return bool(row)


def stack_env() -> dict[str, str]:
    """The stack's environment as dev/stack.py recorded it (``CRAWLER_OPS_STACK_DIR`` or ``.stack``)."""
    try:
        return environment.stack_env()
    except BenchError as exc:
        sys.exit(f"the local stack is not running: {exc}")


def prepare(uri: str, rows: int) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(
            f"CREATE TABLE {SCHEMA}.source_data_table (id int PRIMARY KEY, category varchar(50), "
            "province varchar(50), city varchar(50), district varchar(50))"
        )
        conn.execute(
            f"INSERT INTO {SCHEMA}.source_data_table SELECT i, 'c', '广东省', '深圳市', '区' || i "
            "FROM generate_series(1, %s) AS i",
            (rows,),
        )
        conn.execute(
            f"CREATE TABLE {SCHEMA}.old_status (ID INT NOT NULL, STATUS INT NOT NULL, START_TIME INT NOT "
            "NULL, END_TIME INT, TASK_NAME VARCHAR(50) NOT NULL, unique(ID, TASK_NAME))"
        )
        conn.execute(
            f"INSERT INTO {SCHEMA}.old_status SELECT id, 0, extract(epoch from now())::int, 0, 'old' "
            f"FROM {SCHEMA}.source_data_table"
        )


def old_loop(uri: str, rows: int) -> float:
    """The old executor's run_job: one row per claim, two commits per row, one connection."""
    conn = psycopg.connect(uri)
    cur = conn.cursor()
    started = time.perf_counter()
    done = 0
    for _ in range(rows):
        now = time.time()
        cur.execute(
            f"UPDATE {SCHEMA}.old_status t1 SET status=1, start_time={now} "
            f"from (SELECT * FROM {SCHEMA}.old_status WHERE task_name='old' AND status=0 OR (status=1 and "
            f"{now - 600} > start_time AND end_time=0) ORDER BY id LIMIT 1) t2 "
            "WHERE t1.id=t2.id and t1.task_name=t2.task_name RETURNING t1.id"
        )
        claimed = cur.fetchall()
        conn.commit()
        if not claimed:
            break
        cur.execute(f"select id, province from {SCHEMA}.source_data_table where id = {claimed[0][0]}")
        data = cur.fetchall()
        if trivial({"id": data[0][0], "province": data[0][1]}):
            cur.execute(
                f"UPDATE {SCHEMA}.old_status SET status=2, end_time={time.time()} "
                f"WHERE id={data[0][0]} AND task_name='old'"
            )
            conn.commit()
            done += 1
    elapsed = time.perf_counter() - started
    conn.close()
    assert done == rows, f"old loop finished {done} of {rows}"
    return elapsed


def project_config(name: str, rows: int, workers: int, claim_batch: int, sort: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "source_table": f"{SCHEMA}.source_data_table",
        "status_table": f"{SCHEMA}.status_table",
        "output_fields": ["id", "province"],
        "function": "executor_bench.trivial",
        "cycle_index": rows,
        "workers": workers,
        "claim_batch": claim_batch,
        "schedule": None,
        "sort_fields": sort,
    }


def project(rows: int, workers: int, claim_batch: int, env: dict[str, str], sort: list[str]) -> float:
    """sync, then ``workers`` worker processes started together; wall time of the workers."""
    from crawler_ops.config import ExecutorTaskConfig
    from crawler_ops.executor import sync_rows

    name = f"w{workers}{'_sorted' if sort else ''}"
    cfg = project_config(name, rows, workers, claim_batch, sort)
    sync_rows(ExecutorTaskConfig.model_validate(cfg))
    # Each worker imports first and reports ready; the clock starts when all are told to go, so the
    # figure is claim/complete throughput, not interpreter start-up (Airflow's per-task cost is separate).
    code = (
        "import json, sys; from crawler_ops.config import ExecutorTaskConfig; "
        "from crawler_ops.executor import run_worker; print('ready', flush=True); sys.stdin.readline(); "
        "print(json.dumps(run_worker(ExecutorTaskConfig.model_validate(json.loads(sys.argv[1])), 'bench', "
        "int(sys.argv[2]))))"
    )
    child_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO / "bench")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(cfg), str(i)],
            env=child_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for i in range(workers)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    done = sum(json.loads(p.communicate()[0].strip().splitlines()[-1])["done"] for p in procs)
    elapsed = time.perf_counter() - started
    assert done == rows, f"{workers} workers finished {done} of {rows}"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--claim-batch", type=int, default=20)
    args = parser.parse_args()
    env = stack_env()
    os.environ.update(env)
    uri = env["CRAWLER_OPS_PG_URI"]
    prepare(uri, args.rows)
    old = old_loop(uri, args.rows)
    results = [("old one-row loop (ORDER BY id)", old)]
    for sort in ([], ["district", "city"]):
        for workers in (1, 4):
            order = f"sorted by {', '.join(sort)}" if sort else "id order"
            results.append(
                (f"crawler_ops, {workers} worker(s), {order}", project(args.rows, workers, args.claim_batch, env, sort))
            )
    print(f"rows={args.rows} claim_batch={args.claim_batch} (one run, same database; worker start-up excluded)")
    print("| variant | seconds | rows/s | vs old loop |")
    print("|---|---|---|---|")
    for label, seconds in results:
        print(f"| {label} | {seconds:.2f} | {args.rows / seconds:,.0f} | {old / seconds:.1f}x |")


if __name__ == "__main__":
    main()
