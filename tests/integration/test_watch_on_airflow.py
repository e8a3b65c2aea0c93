"""Watched crawl tasks on Airflow's real services (scheduler, triggerer, dag-processor; LocalExecutor): 50 tasks on
one source, each scheduled on its watch Asset alone. Their triggers run in the triggerer, one event loop for all.
While no source moves, no run is created; when 3 of the 50 sources move, exactly 3 runs start and crawl what is new;
with the triggerer stopped, 2 more sources move, and once it is back exactly those 2 runs start: a restart loses no
change and repeats none.

Like test_pools_on_airflow.py, this module starts Airflow on a config of its own and stops it afterwards: it must not
run while the session's ``airflow`` fixture (airflow_session.py) has Airflow up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psutil
import psycopg
import pytest
import yaml

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from tests.conftest import STACK_DIR, STATE_FILE
from tests.integration.airflow_api import SERVICES_DB, AirflowApi, services_env
from tests.integration.airflow_session import STACK_PY, airflow_services
from tests.namespace import unique_name
from tests.support import DemoSource, make_task, read_topic, watermark

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASKS, RECORDS, NEW = 50, 20, 5
EVERY_S = 5.0
MOVED, MOVED_WHILE_DOWN = (0, 1, 2), (3, 4)


@dataclass(frozen=True)
class Watched:
    api: AirflowApi
    env: dict[str, str]
    tasks: list[CrawlTaskConfig]
    source: DemoSource


def crawled_once(cfg: CrawlTaskConfig, ref: datetime) -> None:
    """A first crawl of the task in this process, through the crawl's own steps: its commit saw the total."""
    run = RunContext(cfg, "first", ref, RunParams())
    chunks = plan_run(run)
    results = [crawl_chunk(replace(run, map_index=i), chunk) for i, chunk in enumerate(chunks)]
    assert commit_run(run, chunks, results).status == "success"


@pytest.fixture(scope="module")
def watched(stack: dict[str, str], source_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    prefix = f"watch_{unique_name()}"
    source = DemoSource(source_url)
    ref = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    tasks = [
        make_task(f"{prefix}_{i}", watch={"every_s": EVERY_S, "refire_s": 600}, paused=True, retries=1)
        for i in range(TASKS)
    ]
    for cfg in tasks:
        source.create(cfg.id, total=RECORDS, ref=ref, in_window_share=1.0)
        crawled_once(cfg, ref)
    config = tmp_path_factory.mktemp("watch") / "tasks.yaml"
    config.write_text(yaml.safe_dump({"tasks": [t.model_dump(mode="json") for t in tasks]}), encoding="utf-8")
    env = {**os.environ, "CRAWLER_OPS_CONFIG": str(config)}
    with airflow_services(env) as api:
        for cfg in tasks:  # unpaused once the api-server answers: a run started before it cannot reach it
            api.wait_for_dag(cfg.dag_id)
            assert api.http.patch(f"/dags/{cfg.dag_id}", json={"is_paused": False}).status_code == 200
        yield Watched(api, env, tasks, source)


def metadata(env: dict[str, str], statement: str, *params: Any) -> list[tuple[Any, ...]]:
    server = urllib.parse.urlsplit(env["CRAWLER_OPS_PG_URI"])
    uri = urllib.parse.urlunsplit(("postgresql", server.netloc, f"/{SERVICES_DB}", server.query, ""))
    with psycopg.connect(uri) as conn:
        return conn.execute(statement, params).fetchall()


def runs(watched: Watched) -> dict[str, list[str]]:
    """The runs of the watched tasks' DAGs, their states by DAG."""
    found: dict[str, list[str]] = {}
    rows = metadata(
        watched.env, "SELECT dag_id, state FROM dag_run WHERE dag_id = ANY(%s)", [t.dag_id for t in watched.tasks]
    )
    for dag_id, state in rows:
        found.setdefault(dag_id, []).append(state)
    return found


def wait_until(what: str, ready: Any, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(1)


def watched_triggers(watched: Watched) -> int:
    rows = metadata(
        watched.env,
        "SELECT count(*) FROM trigger WHERE classpath = %s AND triggerer_id IS NOT NULL",
        "crawler_ops.triggers.source_moved.SourceMovedTrigger",
    )
    return int(rows[0][0])


def succeeded(watched: Watched, indexes: tuple[int, ...]) -> bool:
    done = runs(watched)
    return all(done.get(watched.tasks[i].dag_id) == ["success"] for i in indexes)


def test_runs_start_only_for_the_sources_that_moved_and_a_triggerer_restart_loses_no_change(
    watched: Watched, pg_uri: str, kafka_bootstrap: str
):
    wait_until(f"the triggerer runs the {TASKS} watches", lambda: watched_triggers(watched) == TASKS)
    time.sleep(3 * EVERY_S)
    assert runs(watched) == {}, "no source moved: no run"

    for i in MOVED:
        watched.source.append(watched.tasks[i].id, NEW)
    wait_until("the moved sources' runs", lambda: succeeded(watched, MOVED))
    time.sleep(3 * EVERY_S)
    assert sorted(runs(watched)) == sorted(watched.tasks[i].dag_id for i in MOVED), "exactly the moved ones ran"

    triggerer = int((STACK_DIR / "run" / "airflow-triggerer.pid").read_text())
    os.kill(triggerer, signal.SIGTERM)
    psutil.Process(triggerer).wait(60)
    for i in MOVED_WHILE_DOWN:
        watched.source.append(watched.tasks[i].id, NEW)
    time.sleep(2 * EVERY_S)
    assert len(runs(watched)) == len(MOVED), "no triggerer, no run"
    subprocess.run([*STACK_PY, "airflow-up"], check=True, env=services_env(watched.env))  # starts what is missing
    wait_until(
        "the runs of the sources that moved while the triggerer was down", lambda: succeeded(watched, MOVED_WHILE_DOWN)
    )
    time.sleep(3 * EVERY_S)

    ran = runs(watched)
    assert sorted(ran) == sorted(watched.tasks[i].dag_id for i in (*MOVED, *MOVED_WHILE_DOWN)), ran
    assert all(states == ["success"] for states in ran.values()), ran
    for i, cfg in enumerate(watched.tasks):
        moved = i in (*MOVED, *MOVED_WHILE_DOWN)
        assert watermark(pg_uri, cfg.id) == RECORDS + (NEW if moved else 0), cfg.id
    for i in (*MOVED, *MOVED_WHILE_DOWN):
        keys = [m.key for m in read_topic(kafka_bootstrap, watched.tasks[i].kafka.topic)]
        assert len(keys) == len(set(keys)) == RECORDS + NEW, watched.tasks[i].id
    state = json.loads(STATE_FILE.read_text())["airflow"]
    assert state["executor"] == "local"
