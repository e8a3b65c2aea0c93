"""Unit tests of crawler_ops.ops.status, the per-task status view: which field says what, from fakes of Airflow's run
list, PostgreSQL's stored status and Kafka's admin API (and a PostgreSQL and a source that refuse connections)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from crawler_ops.config import CrawlTaskConfig, parse_config
from crawler_ops.ops import status
from tests.waiting import wait_until

STORED = {
    "status": "incomplete",
    "watermark": 300,
    "total": 400,
    "last_run": {"run_id": "r1", "status": "running"},
}


def task(**overrides: Any) -> CrawlTaskConfig:
    return CrawlTaskConfig.model_validate({"id": "jobs", "kafka": {"topic": "jobs"}, **overrides})


@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    row = json.loads(json.dumps(STORED))
    monkeypatch.setattr(status, "stored_status", lambda cfg: row)
    return row


@pytest.mark.parametrize(
    ("running", "error", "expected", "last_run"),
    [
        ({"crawl_jobs": ["r1"]}, None, True, "running"),
        ({"crawl_other": ["r9"]}, None, False, "abandoned"),
        (None, "Airflow metadata DB not readable here: OperationalError", None, "running"),
    ],
    ids=["a-run-is-active", "no-active-run", "airflow-unreadable"],
)
def test_running_comes_from_airflow_and_a_run_record_left_running_without_a_run_is_abandoned(
    stored, running, error, expected, last_run
):
    row = status.task_row(task(), running, error, status.stored_status(task()), None, None)

    assert row["running"] is expected
    assert row["active_runs"] == (None if running is None else running.get("crawl_jobs", []))
    assert row["last_run"]["status"] == last_run
    assert row.get("running_error") == error
    assert row["progress"] == "75.0%" and "kafka" not in row and "source_total" not in row


def test_an_unreachable_database_is_a_db_error_on_the_row_not_an_exception(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_PG_DOWN", "postgresql://crawler@127.0.0.1:1/crawler")

    row = status.stored_status(task(postgres_conn_id="pg_down"))

    assert row["status"] == "unknown"
    expected = "StatusTableError: task jobs: cannot connect to PostgreSQL (connection 'pg_down')"
    assert row["db_error"].startswith(expected)


def test_an_unreachable_source_is_a_source_error_after_one_attempt(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SRC_DOWN", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 1}))

    result = status.source_total(task(source={"conn_id": "src_down", "max_retries": 5}))

    assert result["source_total"] is None
    assert "GET /api/jobs/count count failed: ConnectError" in result["source_error"]
    assert "(gave up after 1 attempts)" in result["source_error"]


def test_a_source_without_a_count_endpoint_is_not_probed_for_a_report(monkeypatch):
    """Probing a total costs a dozen page requests or more: the report shows the total the last plan found."""
    monkeypatch.setenv("AIRFLOW_CONN_SRC_DOWN", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 1}))

    result = status.source_total(task(source={"conn_id": "src_down", "count_path": None}))

    assert result == {"source_total": None}, "no request, so no connection error either"


# --------------------------------------------------------------------------- Kafka


@dataclass
class Done:
    value: Any

    def result(self, timeout: float | None = None) -> Any:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class FakeAdmin:
    """Topic ``jobs`` with partitions 0 and 1: earliest offsets 10 and 0, latest 50 and 30; group ``g`` committed
    40 on partition 0 and nothing on 1; group ``gone`` fails."""

    def __init__(self, topics: dict[str, Any]) -> None:
        self.topics = topics

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics=self.topics)

    def list_offsets(self, requests: dict[TopicPartition, Any], request_timeout: float) -> dict[TopicPartition, Done]:
        latest = isinstance(next(iter(requests.values())), type(status.OffsetSpec.latest()))
        offsets = {0: 50, 1: 30} if latest else {0: 10, 1: 0}
        return {tp: Done(SimpleNamespace(offset=offsets[tp.partition])) for tp in requests}

    def list_consumer_group_offsets(self, requests: list[Any], request_timeout: float) -> dict[str, Done]:
        (request,) = requests
        if request.group_id == "gone":
            return {"gone": Done(KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND)))}
        committed = [TopicPartition("jobs", 0, 40), TopicPartition("jobs", 1, -1001)]
        return {request.group_id: Done(SimpleNamespace(topic_partitions=committed))}


def jobs_topic(error: Any = None) -> dict[str, Any]:
    return {"jobs": SimpleNamespace(error=error, partitions={0: None, 1: None})}


@pytest.mark.parametrize(
    "topics",
    [{}, jobs_topic(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))],
    ids=["not-listed", "listed-with-an-error"],
)
def test_a_topic_not_created_yet_is_said_so(topics):
    assert status.topic_lag(FakeAdmin(topics), "jobs", ["g"], 5) == {
        "error": "topic 'jobs' does not exist yet",
        "groups": {},
    }


def test_lag_per_group_is_end_minus_committed_or_minus_earliest_where_nothing_is_committed():
    result = status.topic_lag(FakeAdmin(jobs_topic()), "jobs", ["g", "gone"], 5)

    assert (result["messages"], result["end_offset"]) == (70, 80)
    assert result["groups"]["g"] == {"lag": 10 + 30, "committed": 40, "partitions": {0: 10, 1: 30}}
    assert "GROUP_ID_NOT_FOUND" in result["groups"]["gone"]["error"]


# --------------------------------------------------------------------------- the report


def test_the_report_names_an_unknown_task_and_lists_invalid_ones(monkeypatch, stored):
    monkeypatch.setattr(status, "active_runs", lambda dag_ids: ({}, None))
    loaded = parse_config({"tasks": [{"id": "jobs", "kafka": {"topic": "jobs"}}, {"id": "bad", "batch_size": 0}]})

    with pytest.raises(KeyError, match="nope"):
        status.collect(loaded, "nope", live=False)
    report = status.collect(loaded, live=False)

    assert [row["task_id"] for row in report["tasks"]] == ["jobs"]
    assert [bad["task_id"] for bad in report["invalid_tasks"]] == ["bad"]
    assert "field 'batch_size'" in report["invalid_tasks"][0]["error"]


class HeldStored:
    """A stored_status that answers only once released (or after a minute, so that a failed test ends)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, cfg: CrawlTaskConfig) -> dict[str, Any]:
        self.started.set()
        self.release.wait(60)
        return json.loads(json.dumps(STORED))  # a copy: the row is changed in place


def test_a_part_that_has_not_answered_by_the_reports_deadline_is_an_error_on_its_row(monkeypatch):
    held = HeldStored()
    monkeypatch.setattr(status, "active_runs", lambda dag_ids: ({}, None))
    monkeypatch.setattr(status, "stored_status", held)
    loaded = parse_config({"tasks": [{"id": "jobs", "kafka": {"topic": "jobs"}}]})

    try:
        (row,) = status.collect(loaded, live=False, end=time.monotonic() + 0.3)["tasks"]
        assert held.started.is_set() and not held.release.is_set(), "answered while the part was still held"
    finally:
        held.release.set()
    assert row["status"] == "unknown" and row["db_error"] == "no answer within the status deadline of 5s"


def test_a_report_without_a_deadline_waits_for_every_part(monkeypatch):
    held = HeldStored()
    monkeypatch.setattr(status, "active_runs", lambda dag_ids: ({}, None))
    monkeypatch.setattr(status, "stored_status", held)
    loaded = parse_config({"tasks": [{"id": "jobs", "kafka": {"topic": "jobs"}}]})

    with ThreadPoolExecutor(1) as pool:
        report = pool.submit(status.collect, loaded, live=False)
        try:
            wait_until(held.started.is_set, 30, "the stored-progress part to start")
            assert not report.done(), "the report did not wait for its held part"
        finally:
            held.release.set()
        (row,) = report.result(timeout=60)["tasks"]

    assert row["status"] == "incomplete" and row["watermark"] == 300
