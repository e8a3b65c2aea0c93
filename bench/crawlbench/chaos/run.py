"""A whole chaos run: every selected scenario's crawl tasks in one config, one private Airflow for all of them,
the scenarios one after the other, a failed scenario reported as its row without stopping the others."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx
import psycopg
import yaml
from confluent_kafka import KafkaException

from crawlbench.chaos.flights import Flight, Shape, task_entry
from crawlbench.chaos.lab import Lab
from crawlbench.chaos.on_airflow import ChaosAirflow
from crawlbench.chaos.report import Row
from crawlbench.chaos.scenarios import Scenario, plan_flights, run_scenario, scenarios
from crawlbench.common import BenchError
from crawlbench.environment import devstack
from crawlbench.scheduler import scheduler_services, wait_for_dag

# The private Airflow: few executor slots on a small machine, a quick scheduler loop, and task instances whose
# process vanished (an Airflow restart) declared dead after 60 s instead of 5 min.
AIRFLOW_SETTINGS = {
    "AIRFLOW__CORE__PARALLELISM": "8",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
}
SCENARIO_ERRORS = (BenchError, devstack.StackError, psycopg.Error, httpx.HTTPError, KafkaException, OSError)


def write_config(out_dir: Path, flights: Iterable[Flight], shape: Shape) -> Path:
    """One config with every flight's crawl task."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "chaos_tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": [task_entry(f, shape) for f in flights]}, sort_keys=False))
    return path


def run_all(lab: Lab, names: Sequence[str], out_dir: Path) -> list[Row]:
    """Run the named scenarios on one private Airflow; one row per scenario and delivery mode."""
    chosen = [scenarios(lab.settings.kill_rounds)[name] for name in names]
    tag = secrets.token_hex(3)
    flights = {s.name: plan_flights(lab, s, tag) for s in chosen}
    every = [f for group in flights.values() for f in group]
    if not every:
        return [Row.skipped_row(s.name, str(s.skipped)) for s in chosen]
    config = write_config(out_dir, every, lab.settings.shape)
    (out_dir / "airflow").mkdir(parents=True, exist_ok=True)
    lab.say(f"starting a private Airflow for {len(every)} crawl DAGs (config {config})")
    env = {**AIRFLOW_SETTINGS, **lab.conn_env()}
    with scheduler_services(lab.stack, config, out_dir / "airflow", extra_env=env) as services:
        lab.airflow = ChaosAirflow(services)
        for flight in every:
            wait_for_dag(services.env, flight.dag_id)
        return [row for scenario in chosen for row in guarded(lab, scenario, flights[scenario.name])]


def guarded(lab: Lab, scenario: Scenario, flights: Sequence[Flight]) -> list[Row]:
    """The scenario's rows; a scenario that could not complete becomes a row saying why."""
    started = time.monotonic()
    lab.say(f"scenario {scenario.name}")
    try:
        rows = run_scenario(lab, scenario, flights)
    except SCENARIO_ERRORS as exc:
        rows = [Row.failed_row(scenario.name, f"{type(exc).__name__}: {exc}")]
    lab.say(f"scenario {scenario.name} done in {time.monotonic() - started:.0f}s")
    return rows
