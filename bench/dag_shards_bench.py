"""Parse and serialize time of each crawl DAG shard file (``dags/crawl_dags_<i>_of_<n>.py``) for a generated
config of ``--tasks`` crawl tasks: what the DAG processor spends on one file, against its per-file limits
(``[core] dagbag_import_timeout`` 30 s to import, ``[dag_processor] dag_file_processor_timeout`` 50 s in all).

    .venv/bin/python bench/dag_shards_bench.py [--tasks 3000]

No service is needed. On a shared machine the figures move with its load; the limits do not.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "dags"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=3_000, help="crawl tasks in the generated config (default 3000)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="dag_shards_bench_"))
    tasks = [
        {"id": f"t{i:05d}", "kafka": {"topic": f"jobs.t{i:05d}"}, "schedule": "0 * * * *"} for i in range(args.tasks)
    ]
    (folder / "tasks.yaml").write_text(yaml.safe_dump({"tasks": tasks}), encoding="utf-8")
    os.environ.update(
        CRAWLER_OPS_CONFIG=str(folder / "tasks.yaml"),
        AIRFLOW_HOME=str(folder / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT="600",  # measure past the limit instead of stopping at it
    )
    sys.path[:0] = [str(REPO / "plugins")]
    from airflow.dag_processing.dagbag import BundleDagBag
    from airflow.serialization.serialized_objects import DagSerialization

    print(f"{args.tasks:,} crawl tasks; limits: 30 s to import a file, 50 s per file in all\n")
    print("| file | DAGs | parse s | serialize s | total s | import errors |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in sorted(DAGS.glob("crawl_dags_*_of_*.py")):
        started = time.perf_counter()
        bag = BundleDagBag(dag_folder=str(path), bundle_path=str(DAGS))
        parsed = time.perf_counter() - started
        for dag in bag.dags.values():
            DagSerialization.to_dict(dag)
        serialized = time.perf_counter() - started - parsed
        print(
            f"| {path.name} | {len(bag.dags)} | {parsed:.1f} | {serialized:.1f} | {parsed + serialized:.1f} "
            f"| {len(bag.import_errors)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
