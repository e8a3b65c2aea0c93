"""Start, stop and inspect the local stack: Kafka (KRaft), PostgreSQL, the demo source API, Airflow's DB.

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
at an external PostgreSQL instead of the embedded one.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import celery_stack
from pg_server import EmbeddedPostgres, PostgresError, write_private

REPO = Path(__file__).resolve().parent.parent
STACK = Path(os.environ.get("CRAWLER_OPS_STACK_DIR", REPO / ".stack")).resolve()
LOGS = STACK / "logs"
RUN = STACK / "run"
STATE_FILE = STACK / "stack.json"
KAFKA_DIR = REPO / "dev" / "kafka"
PG_DATABASE = "crawler"
AIRFLOW_DATABASE = "airflow"

DEFAULT_PORTS = {
    "kafka": 19092,
    "kafka_controller": 19093,
    "postgres": 15432,
    "source": 18080,
}
AIRFLOW_PORT = 18088
AIRFLOW_SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
AIRFLOW_USER = "admin"


class StackError(RuntimeError):
    """A service could not be started; the message says what to do."""


@dataclass
class Ports:
    kafka: int
    kafka_controller: int
    postgres: int
    source: int


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


def new_cluster_id() -> str:
    """A KRaft cluster id (a UUID in URL-safe base64) that does not start with '-': the storage tool's argument
    parser would take one that does for an option (1 fresh stack in 64 failed to format before this)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


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


def choose_port(service: str, taken: list[int]) -> int:
    """The preferred port if free, else any free port (reported)."""
    default = {**DEFAULT_PORTS, "airflow": AIRFLOW_PORT, "redis": celery_stack.REDIS_PORT}[service]
    preferred = int(os.environ.get(f"CRAWLER_OPS_{service.upper()}_PORT", default))
    if not port_open(preferred) and preferred not in taken:
        return preferred
    chosen = free_port()
    log(f"{service}: port {preferred} is taken by another program; using free port {chosen}")
    return chosen


def load_state() -> dict:
    try:
        return json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- Kafka


def kafka_classpath() -> str:
    lib = KAFKA_DIR / "lib"
    if not any(lib.glob("kafka_2.13-*.jar")):
        if shutil.which("mvn") is None:
            raise StackError("Maven is needed once to fetch the Kafka jars from Maven Central: apt-get install maven")
        log("kafka: fetching broker jars from Maven Central (once; cached in ~/.m2 and dev/kafka/lib)")
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(KAFKA_DIR / "pom.xml"), "package"],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise StackError(f"mvn could not fetch the Kafka jars:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return str(lib / "*")


def java_cmd() -> str:
    java = shutil.which("java")
    if java is None:
        raise StackError(
            "Java 17 or newer is needed for the local Kafka broker: apt-get install openjdk-17-jre-headless"
        )
    return java


def kafka_ready(port: int | str) -> bool:
    """Whether the broker on ``port`` (or a cluster's bootstrap servers) serves metadata."""
    bootstrap = port if isinstance(port, str) else f"127.0.0.1:{port}"
    if isinstance(port, int) and not port_open(port):
        return False
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - any error means "not ready yet" during start-up polling
        return False
    return True


def write_kafka_properties(
    props: Path, node_id: int, port: int, controller_port: int, data: Path, voters: str | None, replicas: int
) -> Path:
    """A KRaft node's server.properties: broker and controller; ``voters`` the quorum (default: this node
    alone); internal topics replicated ``replicas`` times with ``min.insync.replicas`` one less (at least 1)."""
    data.mkdir(parents=True, exist_ok=True)
    template = (KAFKA_DIR / "server.properties.in").read_text()
    values = {
        "@NODE_ID@": str(node_id),
        "@VOTERS@": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "@PORT@": str(port),
        "@CONTROLLER_PORT@": str(controller_port),
        "@DATA_DIR@": str(data),
        "@AUTO_CREATE@": os.environ.get("CRAWLER_OPS_KAFKA_AUTO_CREATE", "false"),
        "@REPLICATION@": str(replicas),
        "@MIN_ISR@": str(max(1, replicas - 1)),
    }
    for key, value in values.items():
        template = template.replace(key, value)
    props.write_text(template)
    return props


def kafka_jvm(java: str, classpath: str) -> list[str]:
    return [
        java,
        "-Xmx384m",
        "-Xms64m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={KAFKA_DIR / 'log4j2.properties'}",
        "-cp",
        classpath,
    ]


def format_kafka_storage(jvm: list[str], data: Path, props: Path, cluster_id: str) -> None:
    """Format a node's log directory once (every node of a cluster with the same ``cluster_id``)."""
    if (data / "meta.properties").exists():
        return
    command = [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")


def start_kafka(ports: Ports) -> None:
    pid = running_pid("kafka")
    if pid is not None and kafka_ready(ports.kafka):
        log(f"kafka: already running (pid {pid}) on 127.0.0.1:{ports.kafka}")
        return
    if pid is not None:
        log(f"kafka: pid {pid} runs but does not answer; restarting it")
        stop_pid("kafka", pid)
    java, classpath = java_cmd(), kafka_classpath()
    data = STACK / "kafka" / "data"
    props = write_kafka_properties(
        STACK / "kafka" / "server.properties", 1, ports.kafka, ports.kafka_controller, data, voters=None, replicas=1
    )
    jvm = kafka_jvm(java, classpath)
    format_kafka_storage(jvm, data, props, new_cluster_id())
    started = time.monotonic()
    pid = spawn("kafka", [*jvm, "kafka.Kafka", str(props)])
    wait_until("kafka", pid, lambda: kafka_ready(ports.kafka), timeout=90)
    log(f"kafka: started (pid {pid}) on 127.0.0.1:{ports.kafka} in {time.monotonic() - started:.1f}s")


# --------------------------------------------------------------------------- PostgreSQL


def pg_server(port: int = 0) -> EmbeddedPostgres:
    """The stack's embedded PostgreSQL (``port`` 0 when only its folders matter)."""
    return EmbeddedPostgres(STACK, port)


def pg_ready(uri: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(uri, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def ensure_database(server_uri: str, name: str) -> None:
    """Create database ``name`` on the server ``server_uri`` connects to, unless it exists."""
    import psycopg

    try:
        with psycopg.connect(server_uri, autocommit=True, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        raise StackError(f"cannot create the PostgreSQL database {name!r}: {exc}".strip()) from exc


def with_database(uri: str, name: str, driver: str = "postgresql") -> str:
    """``uri`` (a postgresql:// URL) naming database ``name`` instead, with scheme ``driver``."""
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit((driver, parts.netloc, f"/{name}", parts.query, parts.fragment))


def metadata_db_uri(postgres_uri: str) -> str:
    """Airflow's metadata DB: database ``airflow`` on the crawler's PostgreSQL server (as in docker-compose),
    unless ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` names another."""
    return os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or with_database(
        postgres_uri, AIRFLOW_DATABASE, "postgresql+psycopg2"
    )


def start_postgres(ports: Ports) -> str:
    external = os.environ.get("CRAWLER_OPS_PG_URI")
    if external:
        import psycopg

        try:
            with psycopg.connect(external, connect_timeout=5):
                pass
        except psycopg.OperationalError as exc:
            raise StackError(f"cannot connect to CRAWLER_OPS_PG_URI within 5s: {exc}".strip()) from exc
        log("postgres: using the external server from CRAWLER_OPS_PG_URI")
        if not os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
            ensure_database(external, AIRFLOW_DATABASE)
        return external
    server = pg_server(ports.postgres)
    try:
        if server.forget_orphan():
            log(f"postgres: removed {server.home}, left by an earlier {STACK} whose password is gone")
        server.prepare()
        if server.running() and pg_ready(server.uri("postgres")):
            log(f"postgres: already running on 127.0.0.1:{ports.postgres}")
        else:
            if server.running():
                log("postgres: a server runs on this data directory but does not answer; restarting it")
                server.stop("immediate")
            started = time.monotonic()
            server.start()
            log(f"postgres: started on 127.0.0.1:{ports.postgres} in {time.monotonic() - started:.1f}s")
    except PostgresError as exc:
        raise StackError(str(exc)) from exc
    if server.legacy:
        log(
            f"postgres: {server.data} predates passwords and trusts every local TCP client; "
            "`dev/stack.py clean` and `up` recreate it with one"
        )
    for database in (PG_DATABASE, AIRFLOW_DATABASE):
        ensure_database(server.uri("postgres"), database)
    seed_demo_tables(server.uri(PG_DATABASE))
    return server.uri(PG_DATABASE)


def seed_demo_tables(uri: str) -> None:
    """The executor demo's source_data_table (idempotent: filled only when empty)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True, connect_timeout=5) as conn:
        conn.execute((REPO / "include" / "sql" / "demo" / "source_data_table.sql").read_text(encoding="utf-8"))


def stop_postgres() -> None:
    server = pg_server()
    if server.running():
        server.stop()
        log("postgres: stopped")


# --------------------------------------------------------------------------- demo source API


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


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


# --------------------------------------------------------------------------- Airflow


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
        # Every Airflow process must agree on these; local development values, kept in .stack/airflow.
        "AIRFLOW__API_AUTH__JWT_SECRET": secret("jwt_secret"),
        "AIRFLOW__API__SECRET_KEY": secret("api_secret_key"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file()),
        "CRAWLER_OPS_CONFIG": os.environ.get("CRAWLER_OPS_CONFIG", str(REPO / "include" / "crawler_tasks.yaml")),
        "CRAWLER_OPS_SOURCE_URL": f"http://127.0.0.1:{ports.source}",
        "CRAWLER_OPS_KAFKA_BOOTSTRAP": bootstrap or f"127.0.0.1:{ports.kafka}",
        "CRAWLER_OPS_PG_URI": postgres_uri,
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
    with the other executor (or another number of workers) is stopped first."""
    state = load_state()
    if not state:
        raise StackError("the stack is not up: run `python dev/stack.py up` first")
    if executor not in celery_stack.EXECUTORS:
        raise StackError(f"unknown executor {executor!r}: one of {', '.join(celery_stack.EXECUTORS)}")
    workers = workers if executor == "celery" else 0
    RUN.mkdir(parents=True, exist_ok=True)
    if (executor, workers) != running_executor(state):
        airflow_down()
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
        "CRAWLER_OPS_CONFIG": os.environ.get("CRAWLER_OPS_CONFIG", state["env"]["CRAWLER_OPS_CONFIG"]),
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
        "config": env["CRAWLER_OPS_CONFIG"],
        "executor": executor,
        "workers": [celery_stack.worker_name(i) for i in range(1, workers + 1)],
    }
    write_private(STATE_FILE, json.dumps(state, indent=2))
    log(f"airflow: UI and REST API on {url} (login {AIRFLOW_USER}, password in {passwords_file()}); logs in {LOGS}")
    if workers:
        log(f"airflow: CeleryExecutor with {workers} workers ({', '.join(state['airflow']['workers'])})")


def running_executor(state: dict) -> tuple[str, int] | None:
    """The executor and worker count of the Airflow that runs on this stack, if one does."""
    running = state.get("airflow")
    if not running or running_pid("airflow-scheduler") is None:
        return None
    return running.get("executor", "local"), len(running.get("workers", []))


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


# --------------------------------------------------------------------------- commands


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


def start_kafka_cluster(nodes: int) -> str:
    """A local KRaft cluster of ``nodes`` nodes in ``.stack/kafka-cluster``; returns its bootstrap servers."""
    from kafka_cluster import KafkaCluster

    started = time.monotonic()
    cluster = KafkaCluster(STACK / "kafka-cluster", nodes)
    bootstrap = cluster.up()
    log(f"kafka: cluster of {len(cluster.nodes)} nodes on {bootstrap} ({time.monotonic() - started:.1f}s)")
    return bootstrap


def stop_kafka_cluster() -> None:
    if (STACK / "kafka-cluster" / "nodes.json").exists():
        from kafka_cluster import KafkaCluster

        KafkaCluster(STACK / "kafka-cluster").down()


def down() -> None:
    stop_kafka_cluster()
    for name in ("kafka", "source"):
        pid = running_pid(name)
        if pid is not None:
            stop_pid(name, pid)
            log(f"{name}: stopped")
    if not os.environ.get("CRAWLER_OPS_PG_URI"):
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


if __name__ == "__main__":
    sys.exit(main())
