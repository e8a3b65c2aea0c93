"""What every part of the local stack shares: its folders and state file, the preferred ports, the error type,
and the process helpers (start in its own session, pid files, stop, wait until ready, read logs).

The bottom of ``dev/``'s stack modules: it imports no other of them except ``pg_server`` and ``celery_stack``
(leaves), so the service modules (``postgres_stack``, ``kafka_server``, ``source_server``, ``airflow_stack``,
``kafka_cluster``) and the ``stack.py`` command line all build on it without importing one another in a circle.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import celery_stack
from pg_server import EmbeddedPostgres, write_private

REPO = Path(__file__).resolve().parent.parent
STACK = Path(os.environ.get("CRAWLER_OPS_STACK_DIR", REPO / ".stack")).resolve()
LOGS = STACK / "logs"
RUN = STACK / "run"
STATE_FILE = STACK / "stack.json"
SOURCE_TOKEN_FILE = STACK / "source.token"

DEFAULT_PORTS = {
    "kafka": 19092,
    "kafka_controller": 19093,
    "postgres": 15432,
    "source": 18080,
    "registry": 18081,
}
AIRFLOW_PORT = 18088


class StackError(RuntimeError):
    """A service could not be started; the message says what to do."""


@dataclass
class Ports:
    kafka: int
    kafka_controller: int
    postgres: int
    source: int
    registry: int = 0


def log(msg: str) -> None:
    print(f"[stack] {msg}", flush=True)


# --------------------------------------------------------------------------- processes and ports


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(name: str) -> int | None:
    path = RUN / f"{name}.pid"
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def running_pid(name: str) -> int | None:
    """The pid of our own service ``name`` if it is alive; a stale pid file is removed."""
    pid = read_pid(name)
    if pid is None:
        return None
    if pid_alive(pid):
        return pid
    log(f"{name}: removing stale pid file (process {pid} is gone)")
    (RUN / f"{name}.pid").unlink(missing_ok=True)
    return None


def reused(name: str, ready: Callable[[], bool], where: str) -> bool:
    """Whether our own ``name`` already runs and answers (``ready``), to be reused; one that runs but does not answer
    is stopped, to be started again."""
    pid = running_pid(name)
    if pid is not None and ready():
        log(f"{name}: already running (pid {pid}) on {where}")
        return True
    if pid is not None:
        log(f"{name}: pid {pid} runs but does not answer; restarting it")
        stop_pid(name, pid)
    return False


def stop_pid(name: str, pid: int, timeout: float = 20.0, run: Path | None = None) -> None:
    """Stop the process group ``pid`` leads (SIGTERM, then SIGKILL) and remove its pid file from ``run``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        log(f"{name}: did not stop within {timeout:.0f}s, killing")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    # A process this one started stays a zombie until it is waited for.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    ((run or RUN) / f"{name}.pid").unlink(missing_ok=True)


def spawn(
    name: str,
    cmd: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    logs: Path | None = None,
    run: Path | None = None,
) -> int:
    """Start ``cmd`` in its own session, output in ``logs/<name>.log``, pid in ``run/<name>.pid``
    (default: the stack's folders)."""
    logfile = open((logs or LOGS) / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child process
    proc = subprocess.Popen(
        cmd,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )
    ((run or RUN) / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def log_size(name: str) -> int:
    path = LOGS / f"{name}.log"
    return path.stat().st_size if path.exists() else 0


def logged_since(name: str, offset: int, text: str) -> bool:
    """Whether ``name``'s log holds ``text`` after byte ``offset``."""
    with (LOGS / f"{name}.log").open("rb") as log:
        log.seek(offset)
        return text.encode() in log.read()


def log_tail(name: str, lines: int = 25, logs: Path | None = None) -> str:
    path = (logs or LOGS) / f"{name}.log"
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_until(name: str, pid: int | None, ready, timeout: float, logs: Path | None = None) -> None:
    logs = logs or LOGS
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if pid is not None and not pid_alive(pid):
            raise StackError(
                f"{name} exited during start-up. Last log lines ({logs / (name + '.log')}):\n"
                f"{log_tail(name, logs=logs)}"
            )
        time.sleep(0.25)
    raise StackError(f"{name} was not ready within {timeout:.0f}s. Last log lines:\n{log_tail(name, logs=logs)}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def choose_port(service: str, taken: list[int]) -> int:
    """The preferred port if free, else any free port (reported)."""
    default = {**DEFAULT_PORTS, "airflow": AIRFLOW_PORT, "redis": celery_stack.REDIS_PORT}[service]
    preferred = int(os.environ.get(f"CRAWLER_OPS_{service.upper()}_PORT", default))
    if not port_open(preferred) and preferred not in taken:
        return preferred
    chosen = free_port()
    log(f"{service}: port {preferred} is taken by another program; using free port {chosen}")
    return chosen


# --------------------------------------------------------------------------- the stack folder, its state and ports


def load_state() -> dict:
    try:
        return json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return {}


def source_token() -> str:
    """The demo source's admin token: generated on first use, kept in ``.stack/source.token`` (0600)."""
    try:
        token = SOURCE_TOKEN_FILE.read_text().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        token = secrets.token_urlsafe(32)
        write_private(SOURCE_TOKEN_FILE, token + "\n")
    return token


def pg_server(port: int = 0) -> EmbeddedPostgres:
    """The stack's embedded PostgreSQL (``port`` 0 when only its folders matter)."""
    return EmbeddedPostgres(STACK, port)


def own_port(service: str) -> int | None:
    """The port our own still-running instance of ``service`` listens on, if there is one."""
    if service == "postgres":
        return pg_server().listening_port()
    name = {"kafka_controller": "kafka", "airflow": "airflow-api-server"}.get(service, service)
    if running_pid(name) is None:
        return None
    try:
        return int(json.loads((RUN / f"{service.split('_')[0]}.ports").read_text())[service])
    except (OSError, ValueError, KeyError):
        return None


def resolve_ports() -> Ports:
    chosen = {}
    for service in DEFAULT_PORTS:
        port = own_port(service)
        if port is None:
            port = choose_port(service, [p for p in chosen.values()])
        chosen[service] = port
    ports = Ports(**chosen)
    (RUN / "kafka.ports").write_text(json.dumps({"kafka": ports.kafka, "kafka_controller": ports.kafka_controller}))
    (RUN / "source.ports").write_text(json.dumps({"source": ports.source}))
    (RUN / "registry.ports").write_text(json.dumps({"registry": ports.registry}))
    return ports


def make_stack_dir() -> None:
    """``.stack`` and its logs and pid folders, private to their owner.

    A stack folder made by an earlier version of this script may hold PostgreSQL's data for its system user,
    who must pass through it: such a folder keeps its mode.
    """
    os.umask(0o077)
    fresh = not STACK.exists()
    for folder in (LOGS, RUN):
        folder.mkdir(parents=True, exist_ok=True)
    if not fresh and not EmbeddedPostgres.predates_passwords(STACK) and STACK.stat().st_mode & 0o077:
        STACK.chmod(0o700)
