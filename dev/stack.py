"""Start, stop and inspect the local stack: Kafka (KRaft), PostgreSQL, the demo source API, a Schema Registry,
Airflow's DB.

Usage (from the repo root, with the project venv)::

    python dev/stack.py up        # idempotent: reuses what already runs, recovers stale pid files
    python dev/stack.py up --kafka-brokers 3   # a 3-node KRaft cluster instead of the single broker
    python dev/stack.py status
    python dev/stack.py env       # shell exports for AIRFLOW_HOME, AIRFLOW_CONN_* ...
    python dev/stack.py down
    python dev/stack.py clean     # down, then delete the stack's data (PostgreSQL's too)

Everything lives in ``.stack/`` (git-ignored, created 0700 with umask 077): data, logs (``.stack/logs``), pid
files, ``stack.json`` with the ports actually used, the generated PostgreSQL password and Airflow login. Run as
root, PostgreSQL's data lives with its system user instead (see ``pg_server.py``). Preferred ports come from
``CRAWLER_OPS_<SERVICE>_PORT``; when a preferred port is taken by something else, a free one is chosen and
reported. ``CRAWLER_OPS_PG_URI`` points the stack
at an external PostgreSQL instead of the embedded one; the embedded server's own URI, which ``env.sh`` exports, is
recognised by its generated password, so ``down`` and ``up`` work the same from a shell that sourced ``env.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import celery_stack
from airflow_stack import (
    airflow_cli,
    airflow_down,
    airflow_healthy,
    airflow_login,
    airflow_service_args,
    airflow_up,
    migrate_airflow,
    stack_env,
)
from kafka_cluster import start_kafka_cluster, stop_kafka_cluster
from kafka_server import kafka_ready, start_kafka
from pg_server import write_private
from postgres_stack import (
    PG_DATABASE,
    ensure_database,
    external_postgres,
    pg_ready,
    start_postgres,
    stop_postgres,
    with_database,
)
from registry_server import registry_ready, start_registry
from source_server import start_source
from stack_common import (
    DEFAULT_PORTS,
    REPO,
    STACK,
    STATE_FILE,
    StackError,
    free_port,
    http_ok,
    load_state,
    log,
    log_tail,
    make_stack_dir,
    pg_server,
    pid_alive,
    read_pid,
    resolve_ports,
    running_pid,
    spawn,
    stop_pid,
    wait_until,
)

# The command line only; the services live in modules below it, none of which imports this one:
#   stack_common    folders, state file, ports, StackError, process helpers (spawn, pid files, stop, wait)
#   postgres_stack  the embedded (or external) PostgreSQL, its databases and URIs (server: pg_server.py)
#   kafka_server    the Kafka jars, a KRaft node's properties and storage, the single broker
#   kafka_cluster   an N-node KRaft cluster (also a command of its own)
#   source_server   the demo source API
#   registry_server the Schema Registry (Apicurio, Confluent-compatible API), built once with Maven
#   airflow_stack   Airflow's environment, secrets, login, DB migration and services (Local or Celery executor)
# Names that the tests and bench/ read as ``stack.<name>`` are imported here for them (see __all__); patch a
# name in the module that defines it.
__all__ = [
    "DEFAULT_PORTS",
    "PG_DATABASE",
    "STATE_FILE",
    "StackError",
    "airflow_cli",
    "airflow_healthy",
    "airflow_login",
    "airflow_service_args",
    "clean",
    "down",
    "ensure_database",
    "free_port",
    "health",
    "http_ok",
    "load_state",
    "log_tail",
    "main",
    "pid_alive",
    "read_pid",
    "spawn",
    "status",
    "stop_pid",
    "up",
    "wait_until",
    "with_database",
]


def up(kafka_brokers: int | None = None) -> dict[str, str]:
    """Start what is not running. ``kafka_brokers`` > 1: a KRaft cluster of that many nodes instead of the single
    broker (default: what the stack ran last time, else 1)."""
    make_stack_dir()
    brokers = kafka_brokers or int(load_state().get("kafka_brokers", 1))
    ports = resolve_ports()
    postgres_uri = start_postgres(ports)
    start_source(ports)
    bootstrap = start_kafka_cluster(brokers) if brokers > 1 else None
    if bootstrap is None:
        stop_kafka_cluster()
        start_kafka(ports)
    elif (pid := running_pid("kafka")) is not None:
        stop_pid("kafka", pid)
    start_registry(ports)
    env = stack_env(ports, postgres_uri, bootstrap)
    state = {"ports": ports.__dict__, "env": env, "kafka_brokers": brokers}
    write_private(STATE_FILE, json.dumps(state, indent=2))
    write_env_file(env)
    migrate_airflow(env)
    log(f"ready; environment in {STACK / 'env.sh'} (source it to use the airflow CLI)")
    return env


def write_env_file(env: dict[str, str]) -> None:
    lines = [f"export {key}={shell_quote(value)}" for key, value in env.items()]
    lines.append(f'export PATH={shell_quote(str(Path(sys.executable).parent))}:"$PATH"')
    write_private(STACK / "env.sh", "\n".join(lines) + "\n")


def shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def down() -> None:
    stop_kafka_cluster()
    for name in ("kafka", "source", "registry"):
        pid = running_pid(name)
        if pid is not None:
            stop_pid(name, pid)
            log(f"{name}: stopped")
    if external_postgres() is None:
        stop_postgres()


def clean() -> None:
    """Stop everything and delete the stack's data: ``.stack`` and PostgreSQL's folder wherever it lives."""
    airflow_down()
    down()
    pg_server().remove()
    shutil.rmtree(STACK, ignore_errors=True)
    log(f"removed {STACK}")


def health(state: dict) -> dict[str, bool]:
    """Whether each service of a started stack (its ``stack.json``) answers."""
    ports, env = state["ports"], state["env"]
    return {
        "postgres": pg_ready(env["CRAWLER_OPS_PG_URI"]),
        "kafka": kafka_ready(
            env["CRAWLER_OPS_KAFKA_BOOTSTRAP"] if state.get("kafka_brokers", 1) > 1 else ports["kafka"]
        ),
        "source": http_ok(f"http://127.0.0.1:{ports['source']}/healthz"),
        "registry": "registry" in ports and registry_ready(ports["registry"]),
    }


def status() -> int:
    state = load_state()
    if not state:
        print("stack: not started (no .stack/stack.json)")
        return 1
    checks = health(state)
    for name, ok in checks.items():
        print(f"{name:9s} {'up' if ok else 'DOWN'}")
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "clean", "status", "env", "airflow-up", "airflow-down"])
    parser.add_argument(
        "--executor", choices=celery_stack.EXECUTORS, default="local", help="airflow-up: LocalExecutor or Celery"
    )
    parser.add_argument("--workers", type=int, default=2, help="airflow-up --executor celery: Celery workers")
    parser.add_argument(
        "--kafka-brokers", type=int, default=None, help="up: nodes of the Kafka cluster (default: as last time, else 1)"
    )
    args = parser.parse_args(argv)
    os.umask(0o077)  # whatever the stack writes is its owner's only
    try:
        if args.command == "up":
            up(args.kafka_brokers)
        elif args.command == "down":
            airflow_down()
            down()
        elif args.command == "clean":
            clean()
        elif args.command == "airflow-up":
            airflow_up(args.executor, args.workers)
        elif args.command == "airflow-down":
            airflow_down()
        elif args.command == "status":
            return status()
        else:
            print(
                (STACK / "env.sh").read_text() if (STACK / "env.sh").exists() else "",
                end="",
            )
    except StackError as exc:
        print(f"[stack] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


def in_project_venv() -> None:
    """Run under the project's venv (``.venv``, which ``make stack-up`` creates): the stack needs its packages
    (psycopg, Airflow). From another interpreter, start again under the venv's; without one, say what to run."""
    venv_python = REPO / ".venv" / "bin" / "python"
    if Path(sys.prefix).resolve() == venv_python.parent.parent.resolve():
        return
    if venv_python.exists():
        os.execv(venv_python, [str(venv_python), *sys.argv])
    raise SystemExit("[stack] ERROR: the project's venv (.venv) does not exist: run `make stack-up`, which creates it")


if __name__ == "__main__":
    in_project_venv()
    sys.exit(main())
