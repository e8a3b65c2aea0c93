"""The stack's demo source API (``dev/demo_source``), served by uvicorn in its own process; its admin API wants the
stack's token (``.stack/source.token``), handed over in the environment, never on the command line."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from stack_common import REPO, Ports, http_ok, log, running_pid, source_token, spawn, stop_pid, wait_until


def admin_guarded(port: int) -> bool:
    """Whether the source on ``port`` refuses its admin API without the token (one started before the token
    was introduced does not)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/tasks", timeout=2):
            return False
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    except (urllib.error.URLError, OSError):
        return False


def start_source(ports: Ports) -> None:
    url = f"http://127.0.0.1:{ports.source}/healthz"
    pid = running_pid("source")
    token = source_token()
    if pid is not None and http_ok(url) and admin_guarded(ports.source):
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
    pid = spawn("source", cmd, env={"PYTHONPATH": str(REPO / "dev"), "DEMO_SOURCE_ADMIN_TOKEN": token})
    wait_until("source", pid, lambda: http_ok(url), timeout=30)
    log(f"source: started (pid {pid}) on 127.0.0.1:{ports.source}")
