"""What a task process pays to load this project before its step runs: the import of the plugin and of each DAG
file, each in a fresh interpreter that has already imported Airflow's task runner (as a task process has).

Example::

    .venv/bin/python bench/import_times.py [--repeat 5]

The best of ``--repeat`` fresh interpreters per module, in seconds (the machine is shared: the minimum is the
figure least disturbed by other work).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from crawlbench.common import REPO
from crawlbench.environment import load_stack

MODULES = ("crawler_ops_plugin", "crawl_dags_1_of_8", "executor_dags", "maintenance_dag", "sample_downstream")
PROBE = (
    "import importlib, sys, time\n"
    "import airflow.sdk, airflow.sdk.execution_time.task_runner\n"
    "started = time.perf_counter()\n"
    "importlib.import_module(sys.argv[1])\n"
    "print(time.perf_counter() - started)\n"
)


def import_seconds(module: str, env: dict[str, str], repeat: int) -> float:
    """The fastest of ``repeat`` imports of ``module``, each in a fresh interpreter."""
    times = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, module], env=env, cwd=REPO, capture_output=True, text=True, check=True
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    stack = load_stack()
    paths = os.pathsep.join(str(REPO / folder) for folder in ("plugins", "dags"))
    env = {
        **os.environ,
        **stack.env,
        "PYTHONPATH": paths,
        "CRAWLER_OPS_CONFIG": str(REPO / "include/crawler_tasks.yaml"),
    }
    print(f"`{' '.join(sys.argv)}`\n\n| module | import s (best of {args.repeat}) |\n|---|---:|")
    for module in MODULES:
        print(f"| {module} | {import_seconds(module, env, args.repeat):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
