"""The status app under a trickling source: parallel status requests beside a sync route of the same server.

A loopback source answers every request one byte every half second (about 31 s for its count). The status app
(``crawler_ops.ops.web``) is mounted, as in Airflow's api-server, next to a sync ``/ping`` route that shares the
server's thread pool the way Airflow's own API does; uvicorn serves both. ``--requests`` status requests are sent at
once while ``/ping`` is timed every 0.2 s. Reported: the status requests' times and answers, how often the source
was asked, ``/ping``'s times meanwhile, and one more status request after them.

    .venv/bin/python bench/status_contention.py                       # this checkout's plugins/
    .venv/bin/python bench/status_contention.py --plugins /tmp/old/plugins --requests 42

No stack is needed: the source is on loopback, the config names only it, and the app's login and auth manager
are replaced by ones that let everything through.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.hostile_source import HostileSource  # noqa: E402 - after the repo is on the path

COUNT = b'{"code": 0, "data": {"total": 5}}' + b" " * 30
DRIP_S = 0.5


class ReadsEverything:
    def is_authorized_dag(self, **_: Any) -> bool:
        return True


def serve_app() -> str:
    """The status app mounted beside a sync /ping on uvicorn; its base URL."""
    import airflow.api_fastapi.app as api_app
    import uvicorn
    from fastapi import FastAPI

    from crawler_ops.ops import web

    api_app.get_auth_manager = ReadsEverything  # type: ignore[assignment]
    web.app.dependency_overrides[web.current_user] = lambda: SimpleNamespace(name="bench")
    parent = FastAPI()

    @parent.get("/ping")
    def ping() -> str:
        return "ok"

    parent.mount("/crawler-ops", web.app)
    server = uvicorn.Server(uvicorn.Config(parent, host="127.0.0.1", port=0, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugins", default=str(REPO / "plugins"))
    parser.add_argument("--requests", type=int, default=42)
    args = parser.parse_args()
    sys.path.insert(0, args.plugins)
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="status-bench-")
    source = HostileSource()
    source.replies["count"] = (200, {"Content-Type": "application/json"}, COUNT)
    source.drips["count"] = DRIP_S
    os.environ["AIRFLOW_CONN_SLOW"] = json.dumps(source.connection())
    config = Path(tempfile.mkdtemp(prefix="status-bench-")) / "tasks.yaml"
    config.write_text("tasks:\n  - {id: slow_task, source: {conn_id: slow}, kafka: {topic: slow}}\n")
    os.environ["CRAWLER_OPS_CONFIG"] = str(config)

    import httpx

    base = serve_app()
    client = httpx.Client(base_url=base, timeout=300, limits=httpx.Limits(max_connections=args.requests + 10))

    def timed(path: str) -> tuple[float, int]:
        started = time.monotonic()
        code = client.get(path).status_code
        return time.monotonic() - started, code

    pings: list[float] = []
    done = threading.Event()

    def ping_every_200ms() -> None:
        while not done.is_set():
            pings.append(timed("/ping")[0])
            time.sleep(0.2)

    print(f"/ping alone: {timed('/ping')[0]:.3f}s")
    pinger = threading.Thread(target=ping_every_200ms)
    with ThreadPoolExecutor(args.requests) as pool:
        futures = [pool.submit(timed, "/crawler-ops/api/status") for _ in range(args.requests)]
        pinger.start()
        answers = [f.result() for f in futures]
    done.set()
    pinger.join()
    times = sorted(t for t, _ in answers)
    codes = {code: sum(1 for _, c in answers if c == code) for code in sorted({c for _, c in answers})}
    print(
        f"{args.requests} status requests: median {times[len(times) // 2]:.1f}s, at most {times[-1]:.1f}s, "
        f"answers {codes}; the source was asked {len(source.served)} times"
    )
    print(f"/ping meanwhile: median {sorted(pings)[len(pings) // 2]:.3f}s, at most {max(pings):.2f}s ({len(pings)})")
    again, code = timed("/crawler-ops/api/status")
    print(f"one more status request: {again:.2f}s ({code}); the source was asked {len(source.served)} times")
    os._exit(0)  # the source's and the server's threads are daemons; some status threads may still trickle


if __name__ == "__main__":
    main()
