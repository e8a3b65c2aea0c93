"""Exactly-once delivery through Airflow's scheduler: ``airflow backfill create`` over several days of a task with
``kafka.delivery: exactly_once``, one of its chunks SIGKILLed mid-way and retried by Airflow. What a
``read_committed`` consumer sees is compared with the demo source's ground truth of each run's data interval."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from tests.integration.airflow_api import (
    RUN_TIMEOUT_S,
    AirflowApi,
    airflow_cli,
    backfill_runs,
    wait_for_first_scheduled_run,
)
from tests.integration.airflow_session import exactly_once_backfill_task
from tests.support import DemoSource, MissingTopic, query, read_topic, watermark

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Each page of the first backfill run is answered this late, so its chunk is still busy when it is killed.
LATENCY_MS = 1_000
KILL_AFTER_BATCHES = 2


def committed_batches(kafka_bootstrap: str, cfg: CrawlTaskConfig, run_id: str) -> int:
    """The batches ``run_id`` committed to Kafka: its markers a read_committed consumer sees."""
    try:
        markers = read_topic(kafka_bootstrap, cfg.marker_topic)
    except MissingTopic:
        return 0
    return sum(1 for m in markers if m.value["run_id"] == run_id)


def chunk_instance(airflow: AirflowApi, dag_id: str, run_id: str) -> dict[str, Any]:
    answer = airflow.http.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100}).json()
    (chunk,) = [ti for ti in answer["task_instances"] if ti["task_id"] == "crawl_chunk"]
    return chunk


def kill_a_chunk_mid_way(airflow: AirflowApi, kafka_bootstrap: str, cfg: CrawlTaskConfig) -> tuple[str, int]:
    """Wait until the first try of a backfill run's chunk has committed KILL_AFTER_BATCHES batches to Kafka, then
    SIGKILL its task process; return the run id and the batches it had committed."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        runs = airflow.http.get(f"/dags/{cfg.dag_id}/dagRuns", params={"run_type": "backfill", "limit": 100}).json()
        for run in (r for r in runs["dag_runs"] if r["state"] == "running"):
            ti = chunk_instance(airflow, cfg.dag_id, run["dag_run_id"])
            if ti["state"] != "running" or ti["try_number"] != 1 or not ti["pid"]:
                continue
            committed = committed_batches(kafka_bootstrap, cfg, run["dag_run_id"])
            if committed >= KILL_AFTER_BATCHES:
                os.kill(ti["pid"], signal.SIGKILL)
                return run["dag_run_id"], committed
        time.sleep(0.2)
    raise AssertionError(f"no backfill chunk of {cfg.dag_id} committed {KILL_AFTER_BATCHES} batches while running")


def test_an_exactly_once_backfill_with_a_chunk_killed_mid_way_publishes_each_interval_once(
    airflow, source_url, kafka_bootstrap, pg_uri, task_ids
):
    task = task_ids["eo_backfill"]
    cfg = exactly_once_backfill_task(task)
    source = DemoSource(source_url)
    wait_for_first_scheduled_run(airflow, cfg.dag_id)  # its window holds no data
    before = watermark(pg_uri, task)

    source.faults(task, latency_ms=LATENCY_MS)
    try:
        created = airflow_cli(
            "backfill", "create", "--dag-id", cfg.dag_id, "--from-date", "2026-10-04", "--to-date", "2026-10-07"
        )
        assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
        killed_run, committed_then = kill_a_chunk_mid_way(airflow, kafka_bootstrap, cfg)
    finally:
        source.clear_faults(task)
    # Runs start at each fire from 2026-10-04 00:00 UTC to 2026-10-07 00:00 UTC: 01:00 and 10:00 UTC of three days.
    runs = backfill_runs(airflow, cfg.dag_id, 6)

    assert [r["state"] for r in runs] == ["success"] * 6
    killed = chunk_instance(airflow, cfg.dag_id, killed_run)
    assert (killed["state"], killed["try_number"]) == ("success", 2), "Airflow retried the killed chunk"
    assert committed_batches(kafka_bootstrap, cfg, killed_run) > committed_then, "killed before its last batch"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)  # read_committed
    every_interval: Counter[str] = Counter()
    for run in runs:
        start, end = (datetime.fromisoformat(run[k]) for k in ("data_interval_start", "data_interval_end"))
        truth = source.ids_between(task, start, end)
        published = Counter(m.key for m in messages if m.headers["run_id"] == run["dag_run_id"])
        assert len(truth) > 100
        assert set(published) == truth, f"{run['dag_run_id']}: missing or unexpected records"
        assert max(published.values()) == 1, f"{run['dag_run_id']}: {published.total() - len(truth)} published twice"
        every_interval += published
    assert set(every_interval.values()) == {1}, "the intervals tile the days: a record belongs to one run"
    records = query(
        pg_uri,
        "SELECT run_id, mode, status FROM crawler_ops.crawl_run WHERE task_id = %s AND run_id = ANY(%s)",
        task,
        [r["dag_run_id"] for r in runs],
    )
    assert sorted(records) == sorted((r["dag_run_id"], "backfill", "success") for r in runs)
    assert watermark(pg_uri, task) == before, "a backfill never moves the watermark"
