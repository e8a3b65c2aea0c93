"""The running local stack as the benchmark sees it, through ``dev/stack.py``: its environment, the
project's producer settings, and Airflow homes on private metadata DBs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawlbench.common import REPO, BenchError

sys.path[:0] = [p for p in (str(REPO / "dev"), str(REPO / "plugins")) if p not in sys.path]

import stack as devstack  # noqa: E402 - dev/ is put on the path just above

START_HINT = "start it with `.venv/bin/python dev/stack.py up`"


@dataclass(frozen=True)
class Stack:
    """The running local stack: its environment, the endpoints the benchmark talks to, and the settings of
    every producer in the benchmark (the project's own)."""

    env: dict[str, str]
    source_url: str
    bootstrap: str
    pg_uri: str
    producer_settings: dict[str, Any]


def stack_env(state: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment ``dev/stack.py up`` recorded (``CRAWLER_OPS_STACK_DIR`` or ``.stack``), with this
    checkout's DAGs and plugins, so a benchmark measures the code next to it. ``PYTHONPATH`` puts this checkout's
    package first: Airflow only appends its plugins folder to the path, so a task process would otherwise import the
    package the virtualenv has installed (an editable install of another checkout, in an A/B from a worktree)."""
    state = devstack.load_state() if state is None else state
    if "env" not in state:
        raise BenchError(f"no usable stack state in {devstack.STATE_FILE}; {START_HINT}")
    inherited = state["env"].get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    return {
        **state["env"],
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "plugins"), inherited])),
    }


def load_stack() -> Stack:
    """The stack's environment, once its source, Kafka and PostgreSQL answer."""
    state = devstack.load_state()
    env = stack_env(state)
    try:
        down = [name for name, ok in devstack.health(state).items() if not ok]
    except KeyError as exc:
        raise BenchError(f"no usable stack state in {devstack.STATE_FILE} ({exc!r}); {START_HINT}") from exc
    if down:
        raise BenchError(f"not answering: {', '.join(down)} (stack state {devstack.STATE_FILE}); {START_HINT}")
    # Airflow reads its home when imported (by the producer settings below): the stack's, not ~/airflow.
    os.environ.update(env)
    return Stack(
        env=env,
        source_url=env["CRAWLER_OPS_SOURCE_URL"],
        bootstrap=env["CRAWLER_OPS_KAFKA_BOOTSTRAP"],
        pg_uri=env["CRAWLER_OPS_PG_URI"],
        producer_settings=producer_settings(),
    )


def producer_settings() -> dict[str, Any]:
    """The settings of the project's producer: its defaults, then the settings its guarantees rest on."""
    from crawler_ops.hooks.kafka.producer import DEFAULT_SETTINGS, REQUIRED_SETTINGS  # imports Airflow: once, untimed

    return {**DEFAULT_SETTINGS, **REQUIRED_SETTINGS}


def airflow_command() -> list[str]:
    """The ``airflow`` CLI of this interpreter's environment."""
    return [devstack.airflow_cli()]


def metadata_db(env: dict[str, str]) -> str:
    """The SQLAlchemy URL of the metadata DB an Airflow environment uses."""
    return env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or f"sqlite:///{Path(env['AIRFLOW_HOME']) / 'airflow.db'}"


@contextmanager
def airflow_env(stack: Stack, shared: bool) -> Iterator[dict[str, str]]:
    """The environment for Airflow commands: the stack's own metadata DB when ``shared``; else a fresh one of the
    benchmark's own (a database on the stack's PostgreSQL, migrated, dropped afterwards), where a benchmark's
    scheduler sees only the DAGs it parses and never a run of anyone else using the stack."""
    env = {**os.environ, **stack.env}
    if shared:
        yield env
        return
    home = Path(tempfile.mkdtemp(prefix="crawl_bench_airflow_"))
    name = f"crawl_bench_{uuid.uuid4().hex[:12]}"
    try:
        devstack.ensure_database(stack.pg_uri, name)
    except devstack.StackError as exc:
        raise BenchError(f"cannot create a private Airflow metadata DB: {exc}") from exc
    try:
        env.update(
            AIRFLOW_HOME=str(home),
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=devstack.with_database(stack.pg_uri, name, "postgresql+psycopg2"),
            AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(home / "logs"),
        )
        (home / "logs").mkdir()
        migrated = subprocess.run([*airflow_command(), "db", "migrate"], env=env, capture_output=True, text=True)
        if migrated.returncode != 0:
            raise BenchError(f"airflow db migrate of the private metadata DB failed:\n{migrated.stderr[-2000:]}")
        yield env
    finally:
        drop_database(stack.pg_uri, name)
        shutil.rmtree(home, ignore_errors=True)


def drop_database(server_uri: str, name: str) -> None:
    """Drop database ``name`` of the server ``server_uri`` connects to, closing what still uses it."""
    import psycopg

    with psycopg.connect(server_uri, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
