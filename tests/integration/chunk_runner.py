"""Run one crawl chunk in its own process, as an Airflow task process would, so a test can SIGKILL it.

Usage: python tests/integration/chunk_runner.py '<json: config, run_id, ref, map_index, try_number, payload>'
"""

from __future__ import annotations

import json
import sys
from datetime import datetime

from crawler_ops.chunk import crawl_chunk
from crawler_ops.config import CrawlTaskConfig
from crawler_ops.run import RunContext, RunParams


def main(spec: dict) -> None:
    run = RunContext(
        cfg=CrawlTaskConfig.model_validate(spec["config"]),
        run_id=spec["run_id"],
        ref=datetime.fromisoformat(spec["ref"]),
        params=RunParams(),
        map_index=spec["map_index"],
        try_number=spec["try_number"],
    )
    print(json.dumps(crawl_chunk(run, spec["payload"])), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
