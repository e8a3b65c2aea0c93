"""Airflow's REST API as the integration tests drive it: triggers with params, run states, backfills through the
airflow CLI, the status app."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

RUN_TIMEOUT_S = 240
# The metadata DB of the Airflow services the tests start (tests/integration/airflow_session.py), not the stack's.
SERVICES_DB = "airflow_test_services"


class AirflowApi:
    """The REST API of the running api-server, with a token from the simple auth manager's login."""

    def __init__(self, url: str, login: list[str]) -> None:
        self.url = url
        self.login = login
        token = httpx.post(f"{url}/auth/token", json={"username": login[0], "password": login[1]}, timeout=30)
        token.raise_for_status()
        self.http = httpx.Client(
            base_url=f"{url}/api/v2", timeout=30, headers={"Authorization": f"Bearer {token.json()['access_token']}"}
        )

    def trigger(
        self, dag_id: str, conf: dict[str, Any] | None = None, logical_date: str | None = None
    ) -> httpx.Response:
        """POST a DAG run; the answer as it came."""
        return self.http.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": logical_date, "conf": conf or {}})

    def wait_for(self, dag_id: str, run_id: str) -> str:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            state = self.http.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(1)
        raise TimeoutError(f"{dag_id} run {run_id} did not finish within {RUN_TIMEOUT_S}s")

    def wait_for_dag(self, dag_id: str) -> None:
        deadline = time.monotonic() + 120
        while self.http.get(f"/dags/{dag_id}").status_code != 200:
            assert time.monotonic() < deadline, f"the dag-processor did not register {dag_id}"
            time.sleep(1)

    def run(self, dag_id: str, conf: dict[str, Any] | None = None) -> tuple[str, str]:
        response = self.trigger(dag_id, conf)
        assert response.status_code == 200, response.text
        run_id = response.json()["dag_run_id"]
        return run_id, self.wait_for(dag_id, run_id)

    def status(self, **params: Any) -> httpx.Response:
        """GET the crawler_ops status app's JSON, logged in."""
        return httpx.get(f"{self.url}/crawler-ops/api/status", params=params, headers=self.http.headers, timeout=60)


def services_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the tests' own metadata DB for Airflow's services, on the stack's PostgreSQL server."""
    server = urllib.parse.urlsplit(env["CRAWLER_OPS_PG_URI"])
    uri = urllib.parse.urlunsplit(("postgresql+psycopg2", server.netloc, f"/{SERVICES_DB}", server.query, ""))
    return {**env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": uri}


def airflow_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the airflow CLI on the metadata DB of the services the tests started."""
    airflow = str(Path(sys.executable).parent / "airflow")
    return subprocess.run([airflow, *args], env=services_env(os.environ), capture_output=True, text=True, timeout=300)


def backfill_runs(airflow: AirflowApi, dag_id: str, count: int) -> list[dict[str, Any]]:
    """Wait until ``count`` backfill runs of ``dag_id`` have finished; return them."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        runs = airflow.http.get(f"/dags/{dag_id}/dagRuns", params={"run_type": "backfill", "limit": 100}).json()
        finished = [r for r in runs["dag_runs"] if r["state"] in ("success", "failed")]
        if len(finished) >= count and all(r["state"] in ("success", "failed") for r in runs["dag_runs"]):
            return sorted(finished, key=lambda r: r["logical_date"])
        time.sleep(2)
    raise TimeoutError(f"{count} backfill runs of {dag_id} did not finish")


def wait_until_idle(airflow: AirflowApi, dag_id: str) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while any(r["state"] in ("queued", "running") for r in _runs(airflow, dag_id)):
        assert time.monotonic() < deadline, f"{dag_id} still has active runs"
        time.sleep(1)


def pause_when_idle(airflow: AirflowApi, dag_id: str) -> None:
    """Pause ``dag_id`` at a moment it has no queued or running run.

    The scheduler neither starts nor advances the runs of a paused DAG, so pausing while a scheduled run is
    queued would leave it queued forever. Pausing takes the DAG's row, which the scheduler holds while it
    creates runs: a run created before the pause is visible right after it, and then the DAG is unpaused to
    let that run finish before trying again."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        wait_until_idle(airflow, dag_id)
        assert airflow.http.patch(f"/dags/{dag_id}", json={"is_paused": True}).status_code == 200
        active = [r["dag_run_id"] for r in _runs(airflow, dag_id) if r["state"] in ("queued", "running")]
        if not active:
            return
        assert time.monotonic() < deadline, f"{dag_id} kept starting runs: {active}"
        assert airflow.http.patch(f"/dags/{dag_id}", json={"is_paused": False}).status_code == 200


def _runs(airflow: AirflowApi, dag_id: str) -> list[dict]:
    return airflow.http.get(f"/dags/{dag_id}/dagRuns", params={"limit": 100}).json()["dag_runs"]


def wait_for_first_scheduled_run(airflow: AirflowApi, dag_id: str) -> None:
    """Wait until the run the scheduler creates when ``dag_id`` is unpaused has finished, and no other is active:
    a test that starts right after the session's Airflow came up would otherwise see that run start later."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not any(
        r["state"] in ("success", "failed")
        for r in airflow.http.get(f"/dags/{dag_id}/dagRuns", params={"run_type": "scheduled"}).json()["dag_runs"]
    ):
        assert time.monotonic() < deadline, f"the scheduler created no run of {dag_id} when it was unpaused"
        time.sleep(1)
    wait_until_idle(airflow, dag_id)
