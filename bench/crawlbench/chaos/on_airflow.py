"""The chaos run's own Airflow (api-server, scheduler, dag-processor, LocalExecutor on a private metadata DB,
see :mod:`crawlbench.scheduler`): runs triggered through its REST API, their states, the processes
of running ``crawl_chunk`` task instances, failed attempts, and a restart of its services."""

from __future__ import annotations

import contextlib
import sys
import time
from contextlib import redirect_stdout
from dataclasses import dataclass

import httpx
import psutil

from crawlbench.common import REPO, BenchError
from crawlbench.environment import devstack, metadata_db
from crawlbench.metadata import metadata_rows
from crawlbench.scheduler import Services, wait_for_api_server

CHUNK_TASK = "crawl_chunk"
# The task runner names its process after the task instance: ``airflow worker -- <ti id>``.
TASK_TITLE = "airflow worker -- "
FINISHED = ("success", "failed")


@dataclass(frozen=True)
class ChunkAttempt:
    """One running try of a mapped ``crawl_chunk`` task instance."""

    dag_id: str
    run_id: str
    map_index: int
    try_number: int
    ti_id: str

    @property
    def token_prefix(self) -> str:
        """How the batch claims of this try start (``run_id|map_index|try|``, see ``crawler_ops.crawl.chunk``)."""
        return f"{self.run_id}|{self.map_index}|{self.try_number}|"


class ChaosAirflow:
    """Triggers, states and task processes of the private Airflow behind ``services``."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = metadata_db(services.env)
        self.url = f"http://127.0.0.1:{services.port}"
        self._http: httpx.Client | None = None

    def rest(self) -> httpx.Client:
        if self._http is None:
            user, password = devstack.airflow_login()
            answer = httpx.post(f"{self.url}/auth/token", json={"username": user, "password": password}, timeout=60)
            answer.raise_for_status()
            token = answer.json()["access_token"]
            self._http = httpx.Client(base_url=f"{self.url}/api/v2", headers={"Authorization": f"Bearer {token}"})
        return self._http

    def trigger(self, dag_id: str) -> str:
        """A manual run without a logical date (its reference time is its ``run_after``); its run id.
        A server error is retried, a 4xx is not."""
        for _ in range(6):
            answer = self.rest().post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}}, timeout=60)
            if answer.status_code < 500:
                break
            time.sleep(2)
        if answer.status_code != httpx.codes.OK:
            raise BenchError(f"trigger of {dag_id} answered {answer.status_code}: {answer.text[:300]}")
        return str(answer.json()["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        query = "SELECT state FROM dag_run WHERE dag_id = :dag AND run_id = :run"
        rows = metadata_rows(self.db, query, dag=dag_id, run=run_id)
        return rows[0][0] if rows else None

    def running_chunks(self, dag_ids: list[str]) -> list[ChunkAttempt]:
        rows = metadata_rows(
            self.db,
            "SELECT dag_id, run_id, map_index, try_number, id FROM task_instance "
            "WHERE task_id = :task AND state = 'running' AND dag_id IN :dags",
            task=CHUNK_TASK,
            dags=list(dag_ids),
        )
        return [ChunkAttempt(d, r, int(m), int(t), str(i).replace("-", "")) for d, r, m, t, i in rows]

    def task_process(self, attempt: ChunkAttempt) -> psutil.Process | None:
        """The process running ``attempt``'s task code: a descendant of this Airflow's scheduler whose title
        names the task instance (never a process of another Airflow on the machine)."""
        with contextlib.suppress(psutil.NoSuchProcess):
            for proc in psutil.Process(self.services.pids["scheduler"]).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    title = " ".join(proc.cmdline()).strip()  # setproctitle pads argv with empty strings
                    if title.startswith(TASK_TITLE) and title[len(TASK_TITLE) :].replace("-", "") == attempt.ti_id:
                        return proc
        return None

    def failed_chunk_attempts(self, dag_id: str) -> int:
        """Tries of ``crawl_chunk`` that did not succeed: earlier tries (history) and failed current ones."""
        where = "WHERE dag_id = :dag AND task_id = :task"
        history = f"SELECT count(*) FROM task_instance_history {where} AND state != 'success'"
        current = f"SELECT count(*) FROM task_instance {where} AND state = 'failed'"
        return sum(int(metadata_rows(self.db, sql, dag=dag_id, task=CHUNK_TASK)[0][0]) for sql in (history, current))

    def restart(self, names: tuple[str, ...], down_s: float) -> None:
        """Stop ``names`` (SIGTERM to each process group, SIGKILL after 20 s), wait ``down_s``, start them again
        with the same command and environment, and wait for the api-server."""
        services = self.services
        with redirect_stdout(sys.stderr):
            for name in names:
                devstack.stop_pid(name, services.pids[name], run=services.log_dir)
        time.sleep(down_s)
        for name in names:
            command = [devstack.airflow_cli(), *devstack.airflow_service_args(name, services.port)]
            services.pids[name] = devstack.spawn(
                name, command, services.env, REPO, logs=services.log_dir, run=services.log_dir
            )
        wait_for_api_server(services, self.url)
