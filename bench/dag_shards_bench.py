"""Parse and serialize time of each crawl DAG shard file (``dags/crawl_dags_<i>_of_<n>.py``) for a generated
config of ``--tasks`` crawl tasks: what the DAG processor spends on one file, against its per-file limits
(``[core] dagbag_import_timeout`` 30 s to import, ``[dag_processor] dag_file_processor_timeout`` 50 s in all), and
the CPU per generated DAG (parse + serialize) against the target of 5 ms.

    .venv/bin/python bench/dag_shards_bench.py [--tasks 3000] [--json]

No service is needed. On a shared machine the figures move with its load; the limits do not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "dags"
#: CPU (parse + serialize) one generated crawl DAG may cost the DAG processor.
TARGET_MS = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=3_000, help="crawl tasks in the generated config (default 3000)")
    parser.add_argument("--json", action="store_true", help="write the generated config as tasks.json, not YAML")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="dag_shards_bench_"))
    tasks = [
        {"id": f"t{i:05d}", "kafka": {"topic": f"jobs.t{i:05d}"}, "schedule": "0 * * * *"} for i in range(args.tasks)
    ]
    config = folder / ("tasks.json" if args.json else "tasks.yaml")
    config.write_text(json.dumps({"tasks": tasks}) if args.json else yaml.safe_dump({"tasks": tasks}), encoding="utf-8")
    os.environ.update(
        CRAWLER_OPS_CONFIG=str(config),
        AIRFLOW_HOME=str(folder / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT="600",  # measure past the limit instead of stopping at it
    )
    sys.path[:0] = [str(REPO / "plugins")]
    from airflow.dag_processing.dagbag import BundleDagBag
    from airflow.serialization.serialized_objects import DagSerialization

    print(
        f"{args.tasks:,} crawl tasks in {config.name}; limits: 30 s to import a file, 50 s per file in all; "
        f"target {TARGET_MS:g} ms CPU a DAG\n"
    )
    print("| file | DAGs | parse s | serialize s | total s (of 50) | CPU ms a DAG | target / CPU | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    dags = cpu = 0.0
    for path in sorted(DAGS.glob("crawl_dags_*_of_*.py")):
        started, cpu_started = time.perf_counter(), time.process_time()
        bag = BundleDagBag(dag_folder=str(path), bundle_path=str(DAGS))
        parsed = time.perf_counter() - started
        for dag in bag.dags.values():
            DagSerialization.to_dict(dag)
        serialized = time.perf_counter() - started - parsed
        used = time.process_time() - cpu_started
        per_dag = used / max(len(bag.dags), 1) * 1000
        dags, cpu = dags + len(bag.dags), cpu + used
        print(
            f"| {path.name} | {len(bag.dags)} | {parsed:.1f} | {serialized:.1f} | {parsed + serialized:.1f} "
            f"| {per_dag:.1f} | {TARGET_MS / per_dag:.2f} | {len(bag.import_errors)} |"
        )
    per_dag = cpu / max(dags, 1) * 1000
    print(
        f"\nall files: {dags:.0f} DAGs, {cpu:.1f} s CPU, {per_dag:.1f} ms a DAG against the target of "
        f"{TARGET_MS:g} ms: {'met' if per_dag <= TARGET_MS else 'NOT met'} (target / CPU {TARGET_MS / per_dag:.2f})"
    )
    floor = airflow_floor_ms(200)
    print(
        f"Airflow's own cost for a DAG of the same shape (four EmptyOperators, one mapped, the same Params and cron "
        f"timetable, no config): {floor:.1f} ms a DAG; crawler_ops adds {per_dag - floor:.1f} ms"
    )
    return 0


def airflow_floor_ms(count: int) -> float:
    """CPU per DAG to build and serialize ``count`` DAGs shaped like a crawl DAG from Airflow's own parts."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, CronDataIntervalTimetable
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.serialization.serialized_objects import DagSerialization

    from crawler_ops.crawl.run import RunParams

    started = time.process_time()
    for i in range(count):
        with DAG(
            f"floor_{i}",
            schedule=CronDataIntervalTimetable("0 * * * *", timezone="Asia/Shanghai"),
            start_date=datetime(2026, 1, 1, tzinfo=UTC),
            catchup=False,
            max_active_runs=1,
        ) as dag:
            plan = EmptyOperator(task_id="plan")
            chunks = EmptyOperator.partial(task_id="crawl_chunk").expand(doc=plan.output)
            plan >> chunks >> EmptyOperator(task_id="commit") >> EmptyOperator(task_id="announce")
        dag.params = ParamsDict(RunParams.airflow_params())
        DagSerialization.to_dict(dag)
    return (time.process_time() - started) / count * 1000


if __name__ == "__main__":
    sys.exit(main())
