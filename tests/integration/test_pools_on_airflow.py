"""A source connection's Airflow pool on Airflow's real services, LocalExecutor and then Celery with two workers
(``dev/stack.py airflow-up``): a crawl task whose ``max_in_flight`` is below its ``concurrency``, on a connection
whose pool does not exist, is run from the REST API. The plugin's listener creates the pool when the run starts, the
scheduler runs the plan and the chunks in it, one slot each, so chunks crawl side by side; their requests in flight
take permits shared through PostgreSQL, and the demo source, which counts the requests it is answering at once,
never has more in flight than ``max_in_flight``, over every process and worker.

Like test_celery.py, this module starts Airflow on a config of its own and stops it afterwards: it must not run
while the session's ``airflow`` fixture (airflow_session.py) has Airflow up.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.conftest import STATE_FILE
from tests.integration.airflow_api import AirflowApi
from tests.integration.airflow_session import airflow_services
from tests.support import DemoSource, make_task, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# 40 batches of 100 in 4 chunks of 10; each page takes 300 ms to answer, so the requests a chunk keeps in flight
# overlap at the source. A chunk reads 4 pages ahead (concurrency) but may have only 3 in flight (max_in_flight).
TOTAL, BATCH, LATENCY_MS, CONCURRENCY, MAX_IN_FLIGHT = 4_000, 100, 300, 4, 3


@dataclass(frozen=True)
class PooledAirflow:
    api: AirflowApi
    executor: str
    task_id: str
    conn_id: str

    @property
    def dag_id(self) -> str:
        return f"crawl_{self.task_id}"

    @property
    def pool(self) -> str:
        return f"crawler_source_{self.conn_id}"


@pytest.fixture(scope="module", params=["local", "celery"])
def pooled(
    request: pytest.FixtureRequest, stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PooledAirflow]:
    """Airflow (LocalExecutor, then Celery with two workers) on a config holding one crawl task with a bounded
    source connection of its own, whose pool nothing created."""
    suffix = uuid.uuid4().hex[:8]
    task_id, conn_id = f"pool_{request.param}_{suffix}", f"pooled_{suffix}"
    cfg = make_task(
        task_id,
        batch_size=BATCH,
        min_batches_per_chunk=10,
        max_chunks=4,
        retries=0,
        paused=True,  # unpaused once the api-server answers (a run started before it cannot reach it)
        source={"conn_id": conn_id, "concurrency": CONCURRENCY, "max_in_flight": MAX_IN_FLIGHT},
    )
    config = tmp_path_factory.mktemp(f"pools_{request.param}") / "tasks.yaml"
    config.write_text(yaml.safe_dump({"tasks": [cfg.model_dump(mode="json")]}, allow_unicode=True), encoding="utf-8")
    env = {
        **os.environ,
        "CRAWLER_OPS_CONFIG": str(config),
        f"AIRFLOW_CONN_{conn_id.upper()}": os.environ["AIRFLOW_CONN_DEMO_SOURCE"],
    }
    up = ["--executor", "celery", "--workers", "2"] if request.param == "celery" else []
    with airflow_services(env, *up) as api:
        state = json.loads(STATE_FILE.read_text())["airflow"]
        assert state["executor"] == request.param
        pooled = PooledAirflow(api, request.param, task_id, conn_id)
        api.wait_for_dag(pooled.dag_id)
        assert api.http.patch(f"/dags/{pooled.dag_id}", json={"is_paused": False}).status_code == 200
        yield pooled  # the pool the listener created goes with the services' metadata DB


def wait_for_pool(api: AirflowApi, name: str, run_id: str, dag_id: str) -> dict[str, object]:
    """The pool ``name`` once it exists; fails when the run ends or a deadline passes without it."""
    deadline = time.monotonic() + 120
    while (answer := api.http.get(f"/pools/{name}")).status_code == 404:
        state = api.http.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
        assert state not in ("success", "failed"), f"run {run_id} ended {state} and pool {name} was never created"
        assert time.monotonic() < deadline, f"no pool {name} two minutes after run {run_id} was triggered"
        time.sleep(0.5)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_the_listener_creates_the_missing_source_pool_and_the_source_never_sees_more_requests_than_its_slots(
    pooled, source_url, kafka_bootstrap
):
    source = DemoSource(source_url)
    ref = datetime.now(UTC).replace(microsecond=0)
    source.create(pooled.task_id, total=TOTAL, ref=ref - timedelta(minutes=1), in_window_share=1.0)
    source.faults(pooled.task_id, latency_ms=LATENCY_MS)
    api = pooled.api
    assert api.http.get(f"/pools/{pooled.pool}").status_code == 404, "the pool must not exist before the run"

    answer = api.trigger(pooled.dag_id)
    assert answer.status_code == 200, answer.text
    run_id = answer.json()["dag_run_id"]
    pool = wait_for_pool(api, pooled.pool, run_id, pooled.dag_id)
    state = api.wait_for(pooled.dag_id, run_id)

    assert pool["slots"] == MAX_IN_FLIGHT, pool
    assert state == "success"
    instances = api.http.get(f"/dags/{pooled.dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100}).json()
    chunks = [ti for ti in instances["task_instances"] if ti["task_id"] == "crawl_chunk"]
    in_flight = source.in_flight(pooled.task_id)
    print(f"{pooled.executor}: chunks on {sorted({ti['hostname'] for ti in chunks})}; source saw {in_flight}")
    assert in_flight["peak"] <= MAX_IN_FLIGHT, f"the source saw more requests at once than max_in_flight: {in_flight}"
    assert in_flight["peak"] >= 2, "the requests never overlapped: the bound was not put to the test"
    assert len(chunks) == 4 and {ti["state"] for ti in chunks} == {"success"}, chunks
    assert {(ti["pool"], ti["pool_slots"]) for ti in chunks} == {(pooled.pool, 1)}, chunks
    spans = sorted((ti["start_date"], ti["end_date"]) for ti in chunks)
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)), (
        f"no two chunks ran at once: one slot each should let {MAX_IN_FLIGHT} run side by side: {spans}"
    )
    run = api.http.get(f"/dags/{pooled.dag_id}/dagRuns/{run_id}").json()
    truth = source.truth(pooled.task_id, datetime.fromisoformat(run["run_after"]), days=7, tolerance_s=24 * 3600)
    assert sorted(m.key for m in read_topic(kafka_bootstrap, f"test.{pooled.task_id}")) == sorted(
        truth["in_window_ids"]
    )
