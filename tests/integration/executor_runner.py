"""Run one executor worker in its own process (as an Airflow worker would), so tests can run several at
once or SIGKILL one. Usage: python tests/integration/executor_runner.py '<json: config, run_id, index>'"""

from __future__ import annotations

import json
import sys

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.executor import run_worker

if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    result = run_worker(ExecutorTaskConfig.model_validate(spec["config"]), spec["run_id"], spec["index"])
    print(json.dumps(result), flush=True)
