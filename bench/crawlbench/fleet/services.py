"""The Airflow the fleet runs on, on a private metadata DB that holds only the benchmark's DAGs: LocalExecutor
(api-server, scheduler, dag-processor started by :func:`crawlbench.scheduler.scheduler_services`) or CeleryExecutor
(``dev/stack.py airflow-up --executor celery --workers N``: also a triggerer, Redis and the workers); its REST API
(the fleet unpaused in one request) and the DAGs' and runs' states read from the metadata DB.

A paused DAG is no way to stop a fleet and let its runs finish: Airflow 3's scheduler neither examines the running
runs of a paused DAG (``DagRun.get_running_dag_runs_to_examine``) nor queues their scheduled task instances, so they
stay running. The fleet is stopped by switching its schedule off instead (the config's ``schedule`` null, parsed
again): the DAGs get no new runs, and their runs go on to their end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from crawlbench.common import REPO, BenchError
from crawlbench.environment import Stack, airflow_env, devstack, metadata_db
from crawlbench.fleet.fleet import Fleet
from crawlbench.metadata import metadata_rows
from crawlbench.scheduler import scheduler_services

STACK_PY = [sys.executable, str(REPO / "dev" / "stack.py")]
ACTIVE = ("queued", "running")


@dataclass
class FleetAirflow:
    """A running Airflow: its executor, environment (for the CLI), metadata DB, api-server, and the processes that
    are not Airflow's (left out of its CPU)."""

    executor: str
    env: dict[str, str]
    db: str
    url: str
    not_airflow: set[int] = field(default_factory=set)
    _http: httpx.Client | None = None

    def rest(self) -> httpx.Client:
        """The REST API (``/api/v2``), logged in as the stack's admin."""
        if self._http is None:
            user, password = devstack.airflow_login()
            answer = httpx.post(f"{self.url}/auth/token", json={"username": user, "password": password}, timeout=60)
            answer.raise_for_status()
            headers = {"Authorization": f"Bearer {answer.json()['access_token']}"}
            self._http = httpx.Client(base_url=f"{self.url}/api/v2", headers=headers, timeout=120)
        return self._http

    def rows(self, statement: str, **params: Any) -> list[tuple[Any, ...]]:
        return metadata_rows(self.db, statement, **params)


@contextmanager
def local_airflow(stack: Stack, config: Path, log_dir: Path) -> Iterator[FleetAirflow]:
    """api-server, scheduler (LocalExecutor) and dag-processor on a private metadata DB, stopped on exit."""
    with scheduler_services(stack, config, log_dir) as services:
        yield FleetAirflow("local", services.env, metadata_db(services.env), f"http://127.0.0.1:{services.port}")


@contextmanager
def celery_airflow(stack: Stack, config: Path, workers: int) -> Iterator[FleetAirflow]:
    """The stack's Celery Airflow (``airflow-up --executor celery``) on a private metadata DB, ``workers`` workers;
    ``airflow-down`` on exit. Redis, the broker, is not Airflow's: its CPU is left out."""
    with airflow_env(stack, shared=False) as env:
        env["CRAWLER_OPS_CONFIG"] = str(config)
        caller = {key: env[key] for key in ("CRAWLER_OPS_CONFIG", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")}
        command_env = {**os.environ, **stack.env, **caller}
        try:
            up = [*STACK_PY, "airflow-up", "--executor", "celery", "--workers", str(workers)]
            subprocess.run(up, env=command_env, check=True, stdout=sys.stderr)
            url = json.loads(Path(devstack.STATE_FILE).read_text())["airflow"]["url"]
            redis = devstack.read_pid("redis")
            yield FleetAirflow(
                "celery", env, env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], url, {redis} if redis else set()
            )
        finally:
            subprocess.run([*STACK_PY, "airflow-down"], env=command_env, check=False, stdout=sys.stderr)


def fleet_dags(airflow: FleetAirflow, fleet: Fleet, where: str) -> int:
    """How many of the fleet's DAGs are registered (serialised, not stale) and meet ``where`` (SQL on ``d``, the
    dag row)."""
    prefix = fleet.dag_prefix
    query = (
        "SELECT count(*) FROM dag d JOIN serialized_dag s ON s.dag_id = d.dag_id "
        f"WHERE substr(d.dag_id, 1, :n) = :prefix AND NOT d.is_stale AND ({where})"
    )
    return int(airflow.rows(query, n=len(prefix), prefix=prefix)[0][0])


def wait_for_dags(airflow: FleetAirflow, fleet: Fleet, where: str, what: str, timeout: float) -> float:
    """Until all the fleet's DAGs meet ``where``; the seconds it took."""
    started = time.monotonic()
    while (done := fleet_dags(airflow, fleet, where)) < fleet.size:
        if time.monotonic() - started > timeout:
            raise BenchError(f"only {done} of {fleet.size} DAGs {what} after {timeout:.0f}s")
        time.sleep(1)
    return time.monotonic() - started


def wait_registered(airflow: FleetAirflow, fleet: Fleet, timeout: float = 900) -> float:
    """Until the dag-processor has serialised every DAG of the fleet; the seconds it took."""
    return wait_for_dags(airflow, fleet, "true", "registered", timeout)


def unpause_fleet(airflow: FleetAirflow, fleet: Fleet) -> None:
    """Unpause every DAG of the fleet in one request (one UPDATE of the metadata DB). ``dag_id_pattern`` (a
    substring, unique to the fleet): Airflow 3.3's ``PATCH /dags`` matched nothing by ``dag_id_prefix_pattern``."""
    answer = airflow.rest().patch(
        "/dags",
        params={"dag_id_pattern": fleet.dag_prefix, "update_mask": "is_paused"},
        json={"is_paused": False},
    )
    if answer.status_code != httpx.codes.OK:
        raise BenchError(f"PATCH /dags answered {answer.status_code}: {answer.text[:300]}")
    if (paused := fleet_dags(airflow, fleet, "d.is_paused")) != 0:
        raise BenchError(f"{paused} DAGs of the fleet are still paused after PATCH /dags")


def wait_schedule(airflow: FleetAirflow, fleet: Fleet, on: bool, timeout: float = 300) -> float:
    """Until the dag-processor has parsed the config's schedule switched on (every DAG has a periodic timetable
    again) or off (none has one, nor a next run to create); the seconds it took."""
    where = "d.timetable_periodic" if on else "NOT d.timetable_periodic AND d.next_dagrun_create_after IS NULL"
    return wait_for_dags(airflow, fleet, where, f"show the schedule {'on' if on else 'off'}", timeout)


def active_runs(airflow: FleetAirflow, fleet: Fleet) -> dict[str, int]:
    """The fleet's runs that are queued or running, by state."""
    prefix = fleet.dag_prefix
    rows = airflow.rows(
        "SELECT state, count(*) FROM dag_run WHERE substr(dag_id, 1, :n) = :prefix AND state IN :states GROUP BY state",
        n=len(prefix),
        prefix=prefix,
        states=list(ACTIVE),
    )
    return {str(state): int(n) for state, n in rows}


def drain(airflow: FleetAirflow, fleet: Fleet, timeout: float) -> float:
    """Until none of the fleet's runs is queued or running, at most ``timeout`` s; the seconds waited."""
    started = time.monotonic()
    while active_runs(airflow, fleet) and time.monotonic() - started < timeout:
        time.sleep(2)
    return time.monotonic() - started
