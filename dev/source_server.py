"""The stack's demo source API (``dev/demo_source``), served by uvicorn in its own process."""

from __future__ import annotations

import sys

from stack_common import REPO, Ports, http_ok, log, running_pid, spawn, stop_pid, wait_until


def start_source(ports: Ports) -> None:
    url = f"http://127.0.0.1:{ports.source}/healthz"
    pid = running_pid("source")
    if pid is not None and http_ok(url):
        log(f"source: already running (pid {pid}) on 127.0.0.1:{ports.source}")
        return
    if pid is not None:
        stop_pid("source", pid)
    cmd = [
        sys.executable,
        "-m",
        "demo_source",
        "--host",
        "127.0.0.1",
        "--port",
        str(ports.source),
    ]
    pid = spawn("source", cmd, env={"PYTHONPATH": str(REPO / "dev")})
    wait_until("source", pid, lambda: http_ok(url), timeout=30)
    log(f"source: started (pid {pid}) on 127.0.0.1:{ports.source}")
