"""The Airflow the fleet runs on, on a private metadata DB that holds only the benchmark's DAGs: LocalExecutor
(api-server, scheduler, dag-processor started by :func:`crawlbench.scheduler.scheduler_services`, and for a watched
fleet a triggerer started the same way) or CeleryExecutor (``dev/stack.py airflow-up --executor celery --workers N``:
also a triggerer, Redis and the workers); its REST API (the fleet unpaused in one request) and the DAGs', runs' and
watch triggers' states read from the metadata DB.

A paused DAG is no way to stop a fleet and let its runs finish: Airflow 3's scheduler neither examines the running
runs of a paused DAG (``DagRun.get_running_dag_runs_to_examine``) nor queues their scheduled task instances, so they
stay running. The fleet is stopped by switching its schedule off instead (the config's ``schedule`` null and no
``watch``, parsed again): the DAGs get no new runs, and their runs go on to their end.

A watched DAG is scheduled on its watch Asset, whose AssetWatcher's trigger the dag-processor writes to the
``trigger`` table when it parses the DAG, and only while the DAG is unpaused (Airflow's ``_find_active_assets``); the
triggerer runs the triggers assigned to it there. Unpausing a watched fleet therefore takes a parse before its watches
run (the DAG files are touched). Switched off, the DAG no longer references its Asset: the parse removes the Asset's
watchers, the triggerer's ``Trigger.clean_unused`` deletes the triggers no watcher references, and the triggerer
cancels the ones it no longer finds. The watches are gone when no ``SourceMovedTrigger`` row is left.
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
from crawlbench.fleet.fleet import Fleet, Schedule, touch_dag_files
from crawlbench.metadata import metadata_rows
from crawlbench.scheduler import scheduler_services

STACK_PY = [sys.executable, str(REPO / "dev" / "stack.py")]
ACTIVE = ("queued", "running")
WATCH_TRIGGER = "crawler_ops.triggers.source_moved.SourceMovedTrigger"
WATCH_ASSET = "crawler_ops_watch_"  # + the task id: the Asset a watched task's DAG is scheduled on
ON_ITS_ASSET = "EXISTS (SELECT 1 FROM dag_schedule_asset_reference r WHERE r.dag_id = d.dag_id)"


@dataclass
class FleetAirflow:
    """A running Airflow: its executor, environment (for the CLI), metadata DB, api-server, the processes that are
    not Airflow's (left out of its CPU) and its triggerer's pid (None: no triggerer)."""

    executor: str
    env: dict[str, str]
    db: str
    url: str
    not_airflow: set[int] = field(default_factory=set)
    triggerer: int | None = None
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
def local_airflow(stack: Stack, config: Path, log_dir: Path, triggerer: bool) -> Iterator[FleetAirflow]:
    """api-server, scheduler (LocalExecutor) and dag-processor on a private metadata DB, and with ``triggerer`` a
    triggerer, spawned like them (its own session, its log beside theirs) and stopped first on exit."""
    with scheduler_services(stack, config, log_dir) as services:
        if triggerer:
            command = [devstack.airflow_cli(), *devstack.airflow_service_args("triggerer", services.port)]
            pid = devstack.spawn("triggerer", command, services.env, REPO, logs=log_dir, run=log_dir)
            services.pids["triggerer"] = pid  # stopped with the others, the last started first
        url, db = f"http://127.0.0.1:{services.port}", metadata_db(services.env)
        yield FleetAirflow("local", services.env, db, url, triggerer=services.pids.get("triggerer"))


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
            redis, triggerer = devstack.read_pid("redis"), devstack.read_pid("airflow-triggerer")
            db = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
            yield FleetAirflow("celery", env, db, url, {redis} if redis else set(), triggerer)
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


def wait_schedule(airflow: FleetAirflow, fleet: Fleet, schedule: Schedule, timeout: float = 300) -> float:
    """Until the dag-processor has parsed ``schedule``: switched on, every DAG has its periodic timetable (a cron) and
    is scheduled on its watch Asset (a watch), and the triggerer runs every watch; switched off, no DAG has either, nor
    a next run to create, and every watch trigger is gone (module doc). The seconds it took."""
    started = time.monotonic()
    if schedule.cron is None and schedule.watch is None:
        where = f"NOT d.timetable_periodic AND d.next_dagrun_create_after IS NULL AND NOT {ON_ITS_ASSET}"
        wait_for_dags(airflow, fleet, where, "show the schedule off", timeout)
        wait_watches(airflow, fleet, 0, timeout - (time.monotonic() - started))
        return time.monotonic() - started
    on = (["d.timetable_periodic"] if schedule.cron else []) + ([ON_ITS_ASSET] if schedule.watch else [])
    wait_for_dags(airflow, fleet, " AND ".join(on), "show the schedule on", timeout)
    if schedule.watch is not None:
        touch_dag_files()  # the watches are written at a parse of the unpaused DAGs: the one above may predate it
        wait_watches(airflow, fleet, fleet.size, timeout - (time.monotonic() - started))
    return time.monotonic() - started


def watch_triggers(airflow: FleetAirflow, fleet: Fleet) -> tuple[int, int]:
    """The fleet's watch triggers that a triggerer runs (assigned, on a watcher of a fleet task's Asset), and every
    watch trigger row left in the metadata DB (which holds only the fleet's)."""
    prefix = f"{WATCH_ASSET}{fleet.base}_"
    running = airflow.rows(
        "SELECT count(DISTINCT t.id) FROM trigger t JOIN asset_watcher w ON w.trigger_id = t.id "
        "JOIN asset a ON a.id = w.asset_id WHERE t.classpath = :classpath AND substr(a.name, 1, :n) = :prefix "
        "AND t.triggerer_id IS NOT NULL",
        classpath=WATCH_TRIGGER,
        n=len(prefix),
        prefix=prefix,
    )
    rows = airflow.rows("SELECT count(*) FROM trigger WHERE classpath = :classpath", classpath=WATCH_TRIGGER)
    return int(running[0][0]), int(rows[0][0])


def wait_watches(airflow: FleetAirflow, fleet: Fleet, running: int, timeout: float) -> float:
    """Until the triggerer runs ``running`` of the fleet's watches (0: until no watch trigger is left at all); the
    seconds it took. A watched fleet needs a triggerer: without one, nothing runs them."""
    started = time.monotonic()
    if running and airflow.triggerer is None:
        raise BenchError("a watched fleet needs Airflow's triggerer, and this Airflow has none")
    while True:
        assigned, rows = watch_triggers(airflow, fleet)
        if (assigned == running) if running else rows == 0:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            want = f"{running} watches running" if running else "no watch trigger left"
            raise BenchError(f"{want}: {assigned} running, {rows} trigger rows after {timeout:.0f} s")
        time.sleep(1)


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
