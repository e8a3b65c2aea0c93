"""Airflow on the local stack: the environment every Airflow process and the tests share (``.stack/env.sh``),
the generated secrets and login, the metadata DB migration, and the api-server, scheduler, dag-processor and
triggerer with LocalExecutor, or with CeleryExecutor, a private Redis and N workers (``celery_stack.py``)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import celery_stack
from pg_server import write_private
from postgres_stack import ensure_database, metadata_db_uri
from registry_server import registry_url
from stack_common import (
    LOGS,
    REPO,
    RUN,
    STACK,
    STATE_FILE,
    Ports,
    StackError,
    choose_port,
    http_ok,
    load_state,
    log,
    log_size,
    logged_since,
    own_port,
    port_open,
    running_pid,
    source_token,
    spawn,
    stop_pid,
    wait_until,
)

AIRFLOW_SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
AIRFLOW_USER = "admin"


def stack_env(ports: Ports, postgres_uri: str, bootstrap: str | None = None) -> dict[str, str]:
    """Environment for Airflow and the tests: where Airflow lives and the connections to the stack."""
    return {
        "AIRFLOW_HOME": str(STACK / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(STACK / "airflow" / "logs"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_db_uri(postgres_uri),
        "AIRFLOW_CONN_CRAWLER_DB": postgres_uri,
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {
                "conn_type": "kafka",
                "extra": {"bootstrap.servers": bootstrap or f"127.0.0.1:{ports.kafka}"},
            }
        ),
        "AIRFLOW_CONN_DEMO_SOURCE": json.dumps(
            {
                "conn_type": "http",
                "host": "127.0.0.1",
                "port": ports.source,
                "schema": "http",
            }
        ),
        # the Schema Registry's Confluent-compatible API, whole URL in host (crawler_ops.hooks.kafka.registry)
        "AIRFLOW_CONN_SCHEMA_REGISTRY": json.dumps({"conn_type": "http", "host": registry_url(ports.registry)}),
        # Every Airflow process must agree on these; local development values, kept in .stack/airflow.
        "AIRFLOW__API_AUTH__JWT_SECRET": secret("jwt_secret"),
        "AIRFLOW__API__SECRET_KEY": secret("api_secret_key"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file()),
        "CRAWLER_OPS_CONFIG": os.environ.get("CRAWLER_OPS_CONFIG", str(REPO / "include" / "crawler_tasks.yaml")),
        "CRAWLER_OPS_SOURCE_URL": f"http://127.0.0.1:{ports.source}",
        "CRAWLER_OPS_SOURCE_ADMIN_TOKEN": source_token(),
        "CRAWLER_OPS_KAFKA_BOOTSTRAP": bootstrap or f"127.0.0.1:{ports.kafka}",
        "CRAWLER_OPS_PG_URI": postgres_uri,
        # the Schema Registry's Confluent-compatible API
        "CRAWLER_OPS_REGISTRY_URL": registry_url(ports.registry),
    }


def secret(name: str) -> str:
    """A random secret generated once per stack (local development only)."""
    path = STACK / "airflow" / "secrets.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    values = json.loads(path.read_text()) if path.exists() else {}
    if name not in values:
        values[name] = uuid.uuid4().hex + uuid.uuid4().hex
        write_private(path, json.dumps(values))
    return str(values[name])


def passwords_file() -> Path:
    """The simple auth manager's password file (0600): the admin password is generated on first use and
    printed once; later runs keep whatever the file holds."""
    path = STACK / "airflow" / "passwords.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        password = secrets.token_urlsafe(12)
        write_private(path, json.dumps({AIRFLOW_USER: password}))
        log(f"airflow: login {AIRFLOW_USER} / {password} (generated; kept in {path})")
    return path


def airflow_login(stack: Path = STACK) -> tuple[str, str]:
    """The Airflow UI / REST API login of the stack in folder ``stack``: user and password."""
    passwords = json.loads((stack / "airflow" / "passwords.json").read_text(encoding="utf-8"))
    return AIRFLOW_USER, str(passwords[AIRFLOW_USER])


def airflow_cli() -> str:
    """The ``airflow`` command of this interpreter's environment."""
    return str(Path(sys.executable).parent / "airflow")


def airflow_service_args(service: str, port: int) -> list[str]:
    """The ``airflow`` arguments that start ``service``; the api-server listens on 127.0.0.1:``port``. The
    scheduler's and triggerer's log servers would listen on every interface: they are skipped, the logs are
    local files the api-server reads itself."""
    if service == "api-server":
        return ["api-server", "-H", "127.0.0.1", "-p", str(port)]
    return [service, "--skip-serve-logs"] if service in ("scheduler", "triggerer") else [service]


def airflow_healthy(url: str) -> bool:
    """The api-server at ``url`` answers its health endpoint."""
    return http_ok(f"{url}/api/v2/monitor/health")


def airflow_up(executor: str = "local", workers: int = 2) -> None:
    """api-server, scheduler, dag-processor and triggerer on the running stack, with LocalExecutor; or with
    ``executor`` "celery": CeleryExecutor, a Redis broker and ``workers`` Celery workers. A running Airflow
    with the other executor, another number of workers, another task config or another metadata DB (see
    ``CALLER_SETTINGS``) is stopped first; one that matches
    is kept, and only its missing services (a killed worker) are started."""
    state = load_state()
    if not state:
        raise StackError("the stack is not up: run `python dev/stack.py up` first")
    if executor not in celery_stack.EXECUTORS:
        raise StackError(f"unknown executor {executor!r}: one of {', '.join(celery_stack.EXECUTORS)}")
    workers = workers if executor == "celery" else 0
    RUN.mkdir(parents=True, exist_ok=True)
    settings = wanted_settings(state)
    if (executor, workers, settings) != running_airflow(state):
        airflow_down()
        prepare_metadata_db({**state["env"], **settings}, state["env"])
    port = own_port("airflow") or choose_port("airflow", [])
    url = f"http://127.0.0.1:{port}"
    env = {
        **state["env"],
        # The checkout that starts Airflow serves its own DAGs and plugins, whichever checkout started the stack.
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        # Ahead of any installed copy of the package (``make`` installs one, editable, for the CLI); then the
        # caller's own path (where the functions a config names may live).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "plugins"), os.environ.get("PYTHONPATH")])),
        **settings,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
    }
    if executor == "celery":
        env.update(celery_stack.celery_env(start_redis(), env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]))
    services = [(f"airflow-{s}", [airflow_cli(), *airflow_service_args(s, port)], env) for s in AIRFLOW_SERVICES]
    for i in range(1, workers + 1):
        worker = {**env, **celery_stack.worker_env(i, env["PYTHONPATH"])}
        services.append((f"airflow-worker-{i}", celery_stack.worker_command(airflow_cli(), i), worker))
    started: dict[str, int] = {}  # where each started service's log began
    for name, command, service_env in services:
        if running_pid(name) is not None:
            log(f"{name}: already running")
            continue
        started[name] = log_size(name)
        spawn(name, command, env=service_env)
    (RUN / "airflow.ports").write_text(json.dumps({"airflow": port}))
    wait_until("airflow-api-server", running_pid("airflow-api-server"), lambda: airflow_healthy(url), timeout=120)
    for name in (n for n in started if n.startswith("airflow-worker-")):
        wait_until(name, running_pid(name), lambda name=name: logged_since(name, started[name], " ready."), 180)
    state["airflow"] = {
        "url": url,
        "login": list(airflow_login()),
        "settings": settings,
        "executor": executor,
        "workers": [celery_stack.worker_name(i) for i in range(1, workers + 1)],
    }
    write_private(STATE_FILE, json.dumps(state, indent=2))
    log(f"airflow: UI and REST API on {url} (login {AIRFLOW_USER}, password in {passwords_file()}); logs in {LOGS}")
    if workers:
        log(f"airflow: CeleryExecutor with {workers} workers ({', '.join(state['airflow']['workers'])})")


# What the caller of airflow-up may choose through its environment: the task config Airflow serves and its metadata
# DB. Without them, a running Airflow's are kept (a service restarted beside the others must serve the same DAGs from
# the same DB), else the stack's defaults.
CALLER_SETTINGS = ("CRAWLER_OPS_CONFIG", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")


def running_airflow(state: dict) -> tuple[str, int, dict[str, str]] | None:
    """The executor, worker count and caller settings of the Airflow that runs on this stack, if one does."""
    running = state.get("airflow")
    if not running or running_pid("airflow-scheduler") is None:
        return None
    return running.get("executor", "local"), len(running.get("workers", [])), running.get("settings", {})


def wanted_settings(state: dict) -> dict[str, str]:
    """The caller settings the Airflow to start is to have: the caller's, else the running Airflow's, else the
    stack's."""
    running = running_airflow(state)
    kept = running[2] if running else {}
    return {key: os.environ.get(key) or kept.get(key) or state["env"][key] for key in CALLER_SETTINGS}


def prepare_metadata_db(env: dict[str, str], stack: dict[str, str]) -> None:
    """A metadata DB other than the stack's (migrated by ``up``) is created on the stack's PostgreSQL server if it
    is missing there, and migrated."""
    uri = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    if uri == stack["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]:
        return
    wanted, ours = urllib.parse.urlsplit(uri), urllib.parse.urlsplit(stack["CRAWLER_OPS_PG_URI"])
    if (wanted.hostname, wanted.port) == (ours.hostname, ours.port):
        ensure_database(stack["CRAWLER_OPS_PG_URI"], wanted.path.lstrip("/"))
    migrate_airflow(env)


def start_redis() -> int:
    """The Celery broker: a private Redis (installed first when missing); its port."""
    port = own_port("redis")
    if port is not None:
        return port
    port = choose_port("redis", [])
    try:
        binary = celery_stack.redis_server(log)
    except celery_stack.RedisMissing as exc:
        raise StackError(str(exc)) from exc
    pid = spawn("redis", celery_stack.redis_command(binary, port, STACK / "redis"))
    (RUN / "redis.ports").write_text(json.dumps({"redis": port}))
    wait_until("redis", pid, lambda: port_open(port), timeout=30)
    log(f"redis: started (pid {pid}) on 127.0.0.1:{port}")
    return port


def airflow_down() -> None:
    """Stop Airflow's services, its Celery workers and their broker."""
    workers = sorted(path.stem for path in RUN.glob("airflow-worker-*.pid")) if RUN.exists() else []
    for name in [f"airflow-{service}" for service in AIRFLOW_SERVICES] + workers + ["redis"]:
        pid = running_pid(name)
        if pid is not None:
            stop_pid(name, pid)
            log(f"{name}: stopped")
    state = load_state()
    if state.pop("airflow", None) is not None:
        write_private(STATE_FILE, json.dumps(state, indent=2))


def migrate_airflow(env: dict[str, str]) -> None:
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    result = subprocess.run(
        [airflow_cli(), "db", "migrate"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    (LOGS / "airflow-migrate.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise StackError(f"airflow db migrate failed; see {LOGS / 'airflow-migrate.log'}:\n{result.stderr[-2000:]}")
    db = urllib.parse.urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    log(f"airflow: metadata DB migrated in {time.monotonic() - started:.1f}s ({db.hostname}:{db.port}{db.path})")
