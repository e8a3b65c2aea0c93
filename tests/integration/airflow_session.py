"""Airflow's real services for a test session: one ``dev/stack.py airflow-up`` on a config holding the session's
crawl tasks and executor, shared by every module that asks for the ``airflow`` fixture (registered in conftest.py),
stopped when the session ends.

Services started by the tests keep their metadata in a database of their own, dropped when they stop: the runs
``dag.test()`` makes in the stack's metadata DB (from tests running beside them under pytest-xdist) are never seen
by their scheduler, and what their dag-processor registers never outlives them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
import yaml

from crawler_ops.config import CrawlTaskConfig
from tests.conftest import STATE_FILE
from tests.integration.airflow_api import SERVICES_DB, AirflowApi, services_env
from tests.namespace import unique_name
from tests.support import DemoSource, Receiver, StatsdCollector, make_task

REPO = Path(__file__).resolve().parents[2]
STACK_PY = [sys.executable, str(REPO / "dev" / "stack.py")]

BACKFILL_REF = datetime(2026, 10, 8, tzinfo=UTC)
# An irregular cron in the default schedule zone (Asia/Shanghai): 09:00 and 18:00 there, 01:00 and 10:00 UTC.
TWICE_A_DAY = "0 9,18 * * *"
SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.fixture(scope="session")
def task_ids() -> dict[str, str]:
    suffix = unique_name()
    return {
        "rest": f"rest_{suffix}",
        "backfill": f"backfill_{suffix}",
        "window_backfill": f"window_backfill_{suffix}",
        "eo_backfill": f"eo_backfill_{suffix}",
        "minutely": f"minutely_{suffix}",
        "executor": f"exec{suffix}",
        "ops": f"ops_{suffix}",
        "cancel": f"cancel_{suffix}",
        "status": f"status_{suffix}",
        "ui": f"ui_{suffix}",
        "defer": f"defer_{suffix}",
    }


def executor_entry(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "source_table": "public.source_data_table",
        "status_table": f"public.status_{name}",
        "category": "上海市",
        "sort_fields": ["district"],
        "output_fields": ["id", "province", "city", "district"],
        "function": "crawler_ops.samples.full_address",
        "cycle_index": 10,
        "workers": 2,
        "schedule": "* * * * *",
        "retries": 0,
        "paused": True,  # unpaused by the airflow fixture, like the crawl tasks
    }


def session_tasks(task_ids: dict[str, str]) -> list[dict[str, Any]]:
    """The session's crawl tasks, paused when created: the scheduler starts before the api-server answers, and a
    run it started then fails (its tasks cannot reach the execution API); the fixture unpauses them once it does."""
    tasks = [
        make_task(task_ids["rest"]),
        make_task(task_ids["backfill"], schedule=TWICE_A_DAY, batch_size=500),
        window_backfill_task(task_ids["window_backfill"]),
        exactly_once_backfill_task(task_ids["eo_backfill"]),
        make_task(task_ids["minutely"], schedule="* * * * *"),
        ops_task(task_ids["ops"]),
        cancel_task(task_ids["cancel"]),
        make_task(task_ids["status"]),
        make_task(task_ids["ui"]),
        deferring_task(task_ids["defer"]),
    ]
    return [{**task.model_dump(mode="json"), "paused": True} for task in tasks]


def window_backfill_task(task_id: str) -> CrawlTaskConfig:
    """A scheduled task to backfill on a source that filters by date (demo source: ``from`` and ``to``)."""
    window = {"query": {"from": "{window_start:%Y-%m-%d %H:%M:%S}", "to": "{window_end:%Y-%m-%d %H:%M:%S}"}}
    return make_task(task_id, schedule=TWICE_A_DAY, batch_size=500, source={"window_filter": window})


def exactly_once_backfill_task(task_id: str) -> CrawlTaskConfig:
    """A scheduled exactly-once task to backfill: one chunk a run, a page at a time, a retry for a killed chunk."""
    kafka = {"delivery": "exactly_once"}
    return make_task(
        task_id, schedule=TWICE_A_DAY, batch_size=50, max_chunks=1, retries=1, kafka=kafka, source={"concurrency": 1}
    )


def deferring_task(task_id: str) -> CrawlTaskConfig:
    """An exactly-once task whose chunk defers when its source asks it to wait more than a second."""
    source = {"defer_after_s": 1, "max_retries": 8, "concurrency": 2}
    return make_task(task_id, max_chunks=1, kafka={"delivery": "exactly_once"}, source=source)


def cancel_task(task_id: str) -> CrawlTaskConfig:
    """A slow task with a webhook, for cancelling runs (connection ops_hook: the session's receiver)."""
    return make_task(task_id, notify={"conn_id": "ops_hook"}, max_chunks=1, source={"concurrency": 1})


@pytest.fixture(scope="session")
def webhook() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


def ops_task(task_id: str) -> CrawlTaskConfig:
    """The task the operations tests watch; the sample downstream DAG reads it as group <id>.downstream_sample."""
    return make_task(task_id, kafka={"consumer_groups": [f"{task_id}.downstream_sample"]})


@pytest.fixture(scope="session")
def statsd() -> StatsdCollector:
    return StatsdCollector()


@pytest.fixture(scope="session")
def airflow(
    stack: dict[str, str],
    task_ids: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    statsd: StatsdCollector,
    webhook: Receiver,
) -> Iterator[AirflowApi]:
    """Airflow's services on a config holding this session's test tasks; stopped afterwards."""
    config = tmp_path_factory.mktemp("airflow") / "tasks.yaml"
    tasks = session_tasks(task_ids)
    # The scheduled tasks' data must exist before their first scheduled run looks at it.
    source = DemoSource(stack["CRAWLER_OPS_SOURCE_URL"])
    source.create(task_ids["backfill"], total=20_000, ref=BACKFILL_REF, in_window_share=0.5)
    source.create(task_ids["window_backfill"], total=20_000, ref=BACKFILL_REF, in_window_share=0.5)
    source.create(task_ids["eo_backfill"], total=8_000, ref=BACKFILL_REF, in_window_share=0.5)
    source.create(
        task_ids["minutely"],
        total=1_500,
        ref=datetime.now(UTC).replace(microsecond=0),
        in_window_share=0.4,
        append_step_s=1,
    )
    document = {"tasks": tasks, "executors": [executor_entry(task_ids["executor"])]}
    config.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    env = {
        **os.environ,
        "CRAWLER_OPS_CONFIG": str(config),
        "CRAWLER_OPS_SAMPLE_DOWNSTREAM_TASK": task_ids["ops"],
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW_CONN_OPS_HOOK": json.dumps({"conn_type": "http", "host": webhook.url, "password": "s3cret-秘密"}),
    }
    with airflow_services(env) as api:
        for key, task_id in task_ids.items():
            dag_id = f"exec_{task_id}" if key == "executor" else f"crawl_{task_id}"
            api.wait_for_dag(dag_id)
            unpaused = api.http.patch(f"/dags/{dag_id}", json={"is_paused": False})
            assert unpaused.status_code == 200, unpaused.text
        yield api


@contextlib.contextmanager
def airflow_services(env: Mapping[str, str], *up_args: str) -> Iterator[AirflowApi]:
    """Airflow's services started by ``dev/stack.py airflow-up *up_args`` on ``env`` and the tests' own metadata
    DB; afterwards, whatever happened, stopped and that DB dropped."""
    env = services_env(env)
    subprocess.run([*STACK_PY, "airflow-down"], check=True, env=env)
    try:
        subprocess.run([*STACK_PY, "airflow-up", *up_args], check=True, env=env)
        state = json.loads(STATE_FILE.read_text())["airflow"]
        yield AirflowApi(state["url"], state["login"])
    finally:
        subprocess.run([*STACK_PY, "airflow-down"], check=True, env=env)
        with psycopg.connect(env["CRAWLER_OPS_PG_URI"], autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{SERVICES_DB}" WITH (FORCE)')
