"""Executor throughput: rows/s claimed and completed, this project (1 and 4 workers, id order and sorted)
against the old one-row-at-a-time loop, same database, same run; once with a trivial function (the queue
binds) and once with a function that sleeps 5 ms (the function should bind). Needs the local stack
(`python dev/stack.py up`).

    .venv/bin/python bench/executor_bench.py [--rows 20000] [--sleep-rows 2000] [--claim-batch 100]

The old loop is reimplemented from the old design (shared/seeds/004): per row, an UPDATE ... RETURNING
claiming one row, a SELECT of its output fields, the user function, an UPDATE marking it done, each
committed, on one connection. Its SQL is built as the old code built it (its known defects do not change
its speed on a single-task table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from crawlbench import environment
from crawlbench.common import BenchError

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "plugins"), str(REPO)]
SCHEMA = "bench_executor"
SLEEP_S = 0.005


def trivial(row: dict[str, Any]) -> bool:
    return bool(row)


def sleep_5ms(row: dict[str, Any]) -> bool:
    time.sleep(SLEEP_S)
    return bool(row)


FUNCTIONS: dict[str, Callable[[dict[str, Any]], bool]] = {"trivial": trivial, "sleep_5ms": sleep_5ms}


def stack_env() -> dict[str, str]:
    """The stack's environment as dev/stack.py recorded it (``CRAWLER_OPS_STACK_DIR`` or ``.stack``)."""
    try:
        return environment.stack_env()
    except BenchError as exc:
        sys.exit(f"the local stack is not running: {exc}")


def prepare(uri: str, rows: int, sleep_rows: int) -> None:
    """The source table (``rows`` rows) and the old executor's status tables, one per function."""
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
            (max(rows, sleep_rows),),
        )
        # A real source table has planner statistics; a freshly filled one gets them here, not minutes later.
        conn.execute(f"ANALYZE {SCHEMA}.source_data_table")
        for function, count in (("trivial", rows), ("sleep_5ms", sleep_rows)):
            conn.execute(
                f"CREATE TABLE {SCHEMA}.old_status_{function} (ID INT NOT NULL, STATUS INT NOT NULL, START_TIME "
                "INT NOT NULL, END_TIME INT, TASK_NAME VARCHAR(50) NOT NULL, unique(ID, TASK_NAME))"
            )
            conn.execute(
                f"INSERT INTO {SCHEMA}.old_status_{function} SELECT id, 0, extract(epoch from now())::int, 0, "
                f"'old' FROM {SCHEMA}.source_data_table WHERE id <= %s",
                (count,),
            )


def old_loop(uri: str, rows: int, function: str) -> float:
    """The old executor's run_job: one row per claim, two commits per row, one connection."""
    udf, table = FUNCTIONS[function], f"{SCHEMA}.old_status_{function}"
    conn = psycopg.connect(uri)
    cur = conn.cursor()
    started = time.perf_counter()
    done = 0
    for _ in range(rows):
        now = time.time()
        cur.execute(
            f"UPDATE {table} t1 SET status=1, start_time={now} "
            f"from (SELECT * FROM {table} WHERE task_name='old' AND status=0 OR (status=1 and "
            f"{now - 600} > start_time AND end_time=0) ORDER BY id LIMIT 1) t2 "
            "WHERE t1.id=t2.id and t1.task_name=t2.task_name RETURNING t1.id"
        )
        claimed = cur.fetchall()
        conn.commit()
        if not claimed:
            break
        cur.execute(f"select id, province from {SCHEMA}.source_data_table where id = {claimed[0][0]}")
        data = cur.fetchall()
        if udf({"id": data[0][0], "province": data[0][1]}):
            cur.execute(
                f"UPDATE {table} SET status=2, end_time={time.time()} WHERE id={data[0][0]} AND task_name='old'"
            )
            conn.commit()
            done += 1
    elapsed = time.perf_counter() - started
    conn.close()
    assert done == rows, f"old loop finished {done} of {rows}"
    return elapsed


def project_config(
    name: str, rows: int, workers: int, claim_batch: int, sort: list[str], function: str
) -> dict[str, Any]:
    return {
        "name": name,
        "source_table": f"{SCHEMA}.source_data_table",
        "status_table": f"{SCHEMA}.status_table",
        "output_fields": ["id", "province"],
        "function": f"executor_bench.{function}",
        "cycle_index": rows,
        "workers": workers,
        "claim_batch": claim_batch,
        "schedule": None,
        "sort_fields": sort,
    }


def project(rows: int, workers: int, claim_batch: int, sort: list[str], function: str) -> float:
    """sync, then ``workers`` worker processes started together, then the summary; wall time of the workers."""
    from crawler_ops.config import ExecutorTaskConfig
    from crawler_ops.executor import summarize, sync_rows

    name = f"{function}_w{workers}{'_sorted' if sort else ''}"
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    cfg = project_config(name, rows, workers, claim_batch, sort, function)
    if sync_rows(ExecutorTaskConfig.model_validate(cfg))["pending"] < rows:
        raise BenchError(f"{name}: fewer than {rows} rows to process")
    # Each worker imports and connects first and reports ready; the clock starts when all are told to go, so
    # the figure is claim/complete throughput, not interpreter start-up or shutdown (Airflow's per-task cost
    # is separate).
    code = (
        "import json, sys; from crawler_ops.config import ExecutorTaskConfig; "
        "from crawler_ops.executor import ExecutorWorker; "
        "worker = ExecutorWorker(ExecutorTaskConfig.model_validate(json.loads(sys.argv[1])), sys.argv[3], "
        "int(sys.argv[2])); worker.hook.db; print('ready', flush=True); sys.stdin.readline(); "
        "print(json.dumps(worker.run()), flush=True)"
    )
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO / "bench")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(cfg), str(i), run_id],
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
    # The clock stops when every worker has printed its result, before the interpreters shut down.
    results = [result_line(proc) for proc in procs]
    elapsed = time.perf_counter() - started
    for proc in procs:
        proc.communicate()
    summary = summarize(ExecutorTaskConfig.model_validate(cfg), run_id, results)
    if summary["run"]["done"] != rows or summary["status"]["done"] != rows:
        raise BenchError(f"{name}: {summary['run']['done']} of {rows} rows done ({summary})")
    return elapsed


def result_line(proc: subprocess.Popen[str]) -> dict[str, int]:
    """The worker's result: the first JSON object it prints (log lines may come before it)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    raise BenchError(f"a worker exited with code {proc.wait()} without a result")


def variants(args: argparse.Namespace, uri: str) -> list[tuple[str, str, int, int, float]]:
    """(function, label, rows, workers, seconds) of every variant, the old loop first for each function."""
    measured = []
    for function, rows in (("trivial", args.rows), ("sleep_5ms", args.sleep_rows)):
        measured.append((function, "old one-row loop (ORDER BY id)", rows, 1, old_loop(uri, rows, function)))
        for sort in ([], ["district", "city"]):
            for workers in (1, 4):
                order = f"sorted by {', '.join(sort)}" if sort else "id order"
                seconds = project(rows, workers, args.claim_batch, sort, function)
                measured.append((function, f"crawler_ops, {workers} worker(s), {order}", rows, workers, seconds))
    return measured


def sleep_cost(calls: int = 200) -> float:
    """What one ``time.sleep(SLEEP_S)`` really takes on this machine now (timer slack, scheduling)."""
    started = time.perf_counter()
    for _ in range(calls):
        time.sleep(SLEEP_S)
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000, help="rows for the trivial function")
    parser.add_argument("--sleep-rows", type=int, default=2_000, help="rows for the function that sleeps 5 ms")
    parser.add_argument("--claim-batch", type=int, default=100)
    args = parser.parse_args()
    env = stack_env()
    os.environ.update(env)
    uri = env["CRAWLER_OPS_PG_URI"]
    prepare(uri, args.rows, args.sleep_rows)
    measured = variants(args, uri)
    print(f"claim_batch={args.claim_batch} (one run, same database; worker start-up excluded)")
    print(f"time.sleep({SLEEP_S}) takes {1000 * sleep_cost():.2f} ms here (the bound below counts 5 ms)")
    print("| function | variant | rows | seconds | rows/s | vs old loop | vs function bound |")
    print("|---|---|---|---|---|---|---|")
    old: dict[str, float] = {}
    for function, label, rows, workers, seconds in measured:
        rate = rows / seconds
        old.setdefault(function, rate)
        bound = f"{rate * SLEEP_S / workers:.0%}" if function == "sleep_5ms" else "-"
        print(
            f"| {function} | {label} | {rows} | {seconds:.2f} | {rate:,.0f} | {rate / old[function]:.1f}x | {bound} |"
        )


if __name__ == "__main__":
    main()
