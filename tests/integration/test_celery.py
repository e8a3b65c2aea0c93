"""Crawls and executors through the Celery topology of docker-compose, without Docker: `dev/stack.py airflow-up
--executor celery --workers 2` (Redis broker, two Celery workers with distinct hostnames, the metadata DB on
the stack's PostgreSQL). What reached Kafka and PostgreSQL is checked against the demo source's ground truth."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
import yaml

from tests.conftest import STACK_DIR, STATE_FILE
from tests.integration.airflow_api import RUN_TIMEOUT_S, AirflowApi, services_env
from tests.integration.airflow_session import STACK_PY, airflow_services
from tests.namespace import unique_name
from tests.support import DemoSource, duplicated_offsets, loopback, make_task, query, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WORKERS = ("celery-worker-1", "celery-worker-2")
CELERY_UP = ("--executor", "celery", "--workers", "2")
# 40 batches of 100 in 4 chunks of 10; the source answers each page in 400 ms and a chunk reads one page at a
# time, so a chunk runs for about 4 s and the four overlap: each worker (2 slots) must take two of them.
TOTAL, BATCH, LATENCY_MS = 4_000, 100, 400


def crawl_entry(task_id: str) -> dict[str, Any]:
    cfg = make_task(
        task_id,
        batch_size=BATCH,
        min_batches_per_chunk=10,
        max_chunks=4,
        retries=3,
        retry_delay_s=1,
        paused=True,  # unpaused once the api-server answers (a run started before it cannot reach it)
        source={"concurrency": 1},
    )
    return cfg.model_dump(mode="json")


# 16 chunks of 5 pages on two workers (two slots each) sharing one OAuth2 token of TOKEN_TTL_S seconds.
OAUTH_TOTAL, TOKEN_TTL_S, CLIENT_SECRET = 8_000, 1.0, "s3cret-celery-client"


def oauth_entry(task_id: str) -> dict[str, Any]:
    auth = {"type": "oauth2_client_credentials", "token_url": f"/oauth/{task_id}/token"}
    cfg = make_task(
        task_id,
        batch_size=BATCH,
        min_batches_per_chunk=1,
        max_chunks=16,
        max_parallel_chunks=16,
        retries=3,
        retry_delay_s=1,
        paused=True,
        source={"concurrency": 1, "conn_id": f"auth_{task_id}", "auth": auth},
    )
    return cfg.model_dump(mode="json")


EXECUTOR_ROWS = 400


@pytest.fixture(scope="module")
def task_ids() -> dict[str, str]:
    suffix = unique_name()
    return {name: f"celery_{name}_{suffix}" for name in ("spread", "kill", "executor", "oauth")}


@pytest.fixture(scope="module")
def executor_schema(stack: dict[str, str], task_ids: dict[str, str]) -> Iterator[str]:
    """A schema with EXECUTOR_ROWS source rows and a log of the user function's calls."""
    name = f"test_{task_ids['executor']}"
    with psycopg.connect(stack["CRAWLER_OPS_PG_URI"], autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(f'CREATE TABLE "{name}".source_data_table (id int PRIMARY KEY, category text, district text)')
        conn.execute(f'CREATE TABLE "{name}".calls (n bigserial PRIMARY KEY, id int NOT NULL, pid int NOT NULL)')
        conn.execute(
            f"INSERT INTO \"{name}\".source_data_table SELECT i, 'all', '区' || i FROM generate_series(1, %s) i",
            (EXECUTOR_ROWS,),
        )
    yield name
    with psycopg.connect(stack["CRAWLER_OPS_PG_URI"], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def executor_entry(name: str, schema: str) -> dict[str, Any]:
    return {
        "name": name,
        "source_table": f"{schema}.source_data_table",
        "status_table": f"{schema}.status_table",
        "category": "all",
        "output_fields": ["id", "district"],
        "function": "tests.integration.executor_functions.record_call_slowly",
        "workers": 4,
        "claim_batch": 10,
        "schedule": None,
        "retries": 0,
        "paused": True,
    }


@pytest.fixture(scope="module")
def celery_env(
    stack: dict[str, str], task_ids: dict[str, str], executor_schema: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The environment every `airflow-up` of this module runs with: a config holding this module's tasks. A
    service restarted without it would serve the default config, where none of these DAGs exists."""
    config = tmp_path_factory.mktemp("celery") / "tasks.yaml"
    crawls = [*(crawl_entry(task_ids[name]) for name in ("spread", "kill")), oauth_entry(task_ids["oauth"])]
    url = httpx.URL(stack["CRAWLER_OPS_SOURCE_URL"])
    oauth_conn = {"conn_type": "http", "host": url.host, "port": url.port, "schema": "http", "login": "crawler"}
    document = {"tasks": crawls, "executors": [executor_entry(task_ids["executor"], executor_schema)]}
    config.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    env = {
        **services_env(os.environ),
        "CRAWLER_OPS_CONFIG": str(config),
        # A task instance whose worker died is failed (and retried) after 20 s without a heartbeat.
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
        # The executor's user function lives in the tests and logs its calls to this schema.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "CRAWLER_OPS_TEST_SCHEMA": executor_schema,
        f"AIRFLOW_CONN_AUTH_{task_ids['oauth'].upper()}": json.dumps({**oauth_conn, "password": CLIENT_SECRET}),
    }
    return env


@pytest.fixture(scope="module")
def celery(celery_env: dict[str, str], task_ids: dict[str, str]) -> Iterator[AirflowApi]:
    """Airflow with CeleryExecutor and two workers on this module's config; stopped afterwards."""
    with airflow_services(celery_env, *CELERY_UP) as api:
        state = json.loads(STATE_FILE.read_text())["airflow"]
        assert state["executor"] == "celery" and state["workers"] == list(WORKERS)
        crawls = [f"crawl_{task_ids[name]}" for name in ("spread", "kill", "oauth")]
        for dag_id in [*crawls, f"exec_{task_ids['executor']}"]:
            api.wait_for_dag(dag_id)
            assert api.http.patch(f"/dags/{dag_id}", json={"is_paused": False}).status_code == 200
        yield api


def slow_source(source: DemoSource, task: str) -> datetime:
    """A fresh data set of TOTAL records, all in the 7-day window, served slowly; its reference time."""
    ref = datetime.now(UTC).replace(microsecond=0)
    source.create(task, total=TOTAL, ref=ref - timedelta(minutes=1), in_window_share=1.0)
    source.faults(task, latency_ms=LATENCY_MS)
    return ref


def chunk_instances(api: AirflowApi, dag_id: str, run_id: str, task_id: str = "crawl_chunk") -> list[dict[str, Any]]:
    answer = api.http.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
    return [ti for ti in answer.json()["task_instances"] if ti["task_id"] == task_id]


def in_window(source: DemoSource, task: str, api: AirflowApi, dag_id: str, run_id: str) -> set[str]:
    """The record ids the run had to publish: the source's truth at the run's reference time (its run_after)."""
    run = api.http.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()
    ref = datetime.fromisoformat(run["run_after"])
    return set(source.truth(task, ref, days=7, tolerance_s=24 * 3600)["in_window_ids"])


def test_the_chunks_of_one_run_run_on_both_workers_and_publish_the_ground_truth(
    celery, source_url, kafka_bootstrap, task_ids
):
    task = task_ids["spread"]
    dag_id = f"crawl_{task}"
    source = DemoSource(source_url)
    slow_source(source, task)

    run_id, state = celery.run(dag_id)

    assert state == "success"
    chunks = chunk_instances(celery, dag_id, run_id)
    assert len(chunks) == 4 and {ti["state"] for ti in chunks} == {"success"}
    assert {ti["hostname"] for ti in chunks} == set(WORKERS), [(ti["map_index"], ti["hostname"]) for ti in chunks]
    messages = read_topic(kafka_bootstrap, f"test.{task}")
    keys = [m.key for m in messages]
    assert sorted(keys) == sorted(in_window(source, task, celery, dag_id, run_id))
    assert len(keys) == TOTAL


def test_an_executor_run_spreads_its_workers_over_both_celery_workers_and_calls_each_row_once(
    celery, pg_uri, task_ids, executor_schema
):
    dag_id = f"exec_{task_ids['executor']}"

    run_id, state = celery.run(dag_id)

    assert state == "success"
    workers = chunk_instances(celery, dag_id, run_id, "work")
    assert len(workers) == 4 and {ti["hostname"] for ti in workers} == set(WORKERS), workers
    calls = query(pg_uri, f'SELECT id, count(*) FROM "{executor_schema}".calls GROUP BY id')
    assert len(calls) == EXECUTOR_ROWS and {n for _, n in calls} == {1}, "a row called twice or never"
    done = query(pg_uri, f'SELECT count(*) FROM "{executor_schema}".status_table WHERE status = 2')
    assert done == [(EXECUTOR_ROWS,)]


def worker_pid(name: str) -> int:
    index = WORKERS.index(name) + 1
    return int((STACK_DIR / "run" / f"airflow-worker-{index}.pid").read_text())


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (the Celery pool and the task processes it started)."""
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)


def test_a_worker_killed_mid_chunk_loses_nothing_the_other_worker_finishes_the_run(
    celery, celery_env, source_url, kafka_bootstrap, pg_uri, task_ids
):
    task = task_ids["kill"]
    dag_id = f"crawl_{task}"
    source = DemoSource(source_url)
    slow_source(source, task)
    answer = celery.trigger(dag_id)
    assert answer.status_code == 200, answer.text
    run_id = answer.json()["dag_run_id"]

    # Wait until a chunk on worker 2 has finished at least one batch, then kill the worker and its tasks.
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        running = [ti for ti in chunk_instances(celery, dag_id, run_id) if ti["state"] == "running"]
        victims = [ti for ti in running if ti["hostname"] == WORKERS[1]]
        done = query(pg_uri, "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 2", task)
        if victims and done[0][0] >= 1:
            break
        assert time.monotonic() < deadline, f"no chunk ran on {WORKERS[1]}: {running}"
        time.sleep(0.2)
    kill_tree(worker_pid(WORKERS[1]))
    try:
        state = celery.wait_for(dag_id, run_id)
    finally:
        # The killed worker comes back for the module's other tests, on the module's config.
        subprocess.run([*STACK_PY, "airflow-up", *CELERY_UP], check=True, env=celery_env)

    assert state == "success"
    chunks = chunk_instances(celery, dag_id, run_id)
    retried = [ti for ti in chunks if ti["try_number"] > 1]
    assert retried and {ti["hostname"] for ti in retried} == {WORKERS[0]}, chunks
    messages = read_topic(kafka_bootstrap, f"test.{task}")
    assert {m.key for m in messages} == in_window(source, task, celery, dag_id, run_id), "records lost"
    repeated = duplicated_offsets(messages)
    assert len({offset // BATCH for offset in repeated}) <= len(victims), f"more than a batch per kill: {repeated}"


def test_sixteen_chunks_on_two_workers_make_one_token_request_per_expiry(celery, source_url, kafka_bootstrap, task_ids):
    task = task_ids["oauth"]
    dag_id = f"crawl_{task}"
    source = DemoSource(source_url)
    ref = datetime.now(UTC).replace(microsecond=0)
    auth = {"type": "oauth2", "client_id": "crawler", "client_secret": CLIENT_SECRET, "token_ttl_s": TOKEN_TTL_S}
    auth["token_latency_ms"] = 300  # a slow provider: workers that need a token meanwhile wait on the row lock
    source.create(task, total=OAUTH_TOTAL, ref=ref - timedelta(minutes=1), in_window_share=1.0, auth=auth)
    source.faults(task, latency_ms=200)

    run_id, state = celery.run(dag_id)

    assert state == "success"
    chunks = chunk_instances(celery, dag_id, run_id)
    assert len(chunks) == 16 and {ti["hostname"] for ti in chunks} == set(WORKERS)
    keys = [m.key for m in read_topic(kafka_bootstrap, f"test.{task}")]
    assert sorted(keys) == sorted(in_window(source, task, celery, dag_id, run_id)) and len(keys) == OAUTH_TOTAL
    state = source._json("GET", f"/admin/tasks/{task}/auth")
    issued = state["issued_at"]
    assert len(issued) >= 3, f"the run outlived several tokens ({len(issued)} issued): nothing was tested"
    # One worker renews a token a tenth of its lifetime before it expires; no token comes sooner after the last.
    gaps = [later - earlier for earlier, later in itertools.pairwise(issued)]
    assert min(gaps) >= 0.9 * TOKEN_TTL_S - 0.05, f"tokens {min(gaps):.3f}s apart (lifetime {TOKEN_TTL_S}s): {gaps}"
    assert state["refused_grants"] == 0


def test_no_process_of_the_stack_listens_beyond_loopback(celery):
    """Airflow's services, the Celery workers, Redis, PostgreSQL, Kafka and the source: loopback only."""
    roots = [int(f.read_text()) for f in (STACK_DIR / "run").glob("*.pid")]
    pids = set()
    for root in roots:
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(root)
            pids |= {process.pid, *(child.pid for child in process.children(recursive=True))}
    exposed = [
        (c.pid, c.laddr)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids and not loopback(c.laddr.ip)
    ]
    assert pids and not exposed, exposed
