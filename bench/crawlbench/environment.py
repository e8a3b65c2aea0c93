"""The running local stack as the benchmark sees it, through ``dev/stack.py``: its environment, the
project's producer settings, and Airflow homes on private copies of the stack's metadata DB."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
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
    checkout's DAGs and plugins, so a benchmark measures the code next to it."""
    state = devstack.load_state() if state is None else state
    if "env" not in state:
        raise BenchError(f"no usable stack state in {devstack.STATE_FILE}; {START_HINT}")
    return {
        **state["env"],
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
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
    from crawler_ops.hooks.producer import DEFAULT_SETTINGS, REQUIRED_SETTINGS  # imports Airflow: once, untimed

    return {**DEFAULT_SETTINGS, **REQUIRED_SETTINGS}


def airflow_command() -> list[str]:
    """The ``airflow`` CLI of this interpreter's environment."""
    return [devstack.airflow_cli()]


def metadata_db(env: dict[str, str]) -> Path:
    """The SQLite metadata DB an Airflow environment uses (a private copy's, else its home's)."""
    conn = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    return Path(conn.removeprefix("sqlite:///")) if conn else Path(env["AIRFLOW_HOME"]) / "airflow.db"


@contextmanager
def airflow_env(stack: Stack, shared: bool, quiesce: bool = False) -> Iterator[dict[str, str]]:
    """The environment for Airflow commands: the stack's, on a private copy of its metadata DB unless
    ``shared`` (so the benchmark never holds the SQLite lock other users of the stack need).

    With ``quiesce`` (for a real scheduler on the copy), every DAG already in the copy is paused and its
    queued or running runs are marked failed, so only the benchmark's own DAG can run.
    """
    env = {**os.environ, **stack.env}
    if shared:
        yield env
        return
    home = Path(tempfile.mkdtemp(prefix="crawl_bench_airflow_"))
    try:
        try:
            copy_airflow_home(Path(stack.env["AIRFLOW_HOME"]), home, quiesce)
        except (OSError, sqlite3.Error) as exc:
            raise BenchError(f"cannot copy the Airflow metadata DB from {stack.env['AIRFLOW_HOME']}: {exc}") from exc
        env.update(
            AIRFLOW_HOME=str(home),
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
            AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(home / "logs"),
        )
        yield env
    finally:
        shutil.rmtree(home, ignore_errors=True)


def copy_airflow_home(source: Path, home: Path, quiesce: bool) -> None:
    """``airflow.cfg`` and a consistent copy of ``airflow.db`` (SQLite's backup API) into ``home``."""
    shutil.copy2(source / "airflow.cfg", home / "airflow.cfg")
    with sqlite3.connect(source / "airflow.db") as src, sqlite3.connect(home / "airflow.db") as dst:
        src.backup(dst)
        if quiesce:
            dst.execute("UPDATE dag SET is_paused = 1")
            dst.execute("UPDATE dag_run SET state = 'failed' WHERE state IN ('queued', 'running')")
    (home / "logs").mkdir()
