"""Run one executor worker in its own process (as an Airflow worker would), so a test can run several at once
or SIGKILL one. With a ``go`` path in the spec the worker connects, writes ``<go>.ready.<index>`` and waits
for ``go`` to exist, so several workers start claiming together.

Usage: python tests/integration/executor_worker_process.py '<json: config, run_id, index[, go]>'"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.executor import ExecutorWorker

if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    worker = ExecutorWorker(ExecutorTaskConfig.model_validate(spec["config"]), spec["run_id"], spec["index"])
    assert worker.hook.db is not None
    if spec.get("go"):
        Path(f"{spec['go']}.ready.{spec['index']}").touch()
        while not Path(spec["go"]).exists():
            time.sleep(0.01)
    print(json.dumps(worker.run()), flush=True)
