"""The crawl tasks of a chaos run: one per scenario and delivery mode ("flights"), their config entries, their
demo-source data sets, their runs on the private Airflow, and what their topics hold afterwards."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from crawlbench.chaos.count import BatchBounds, Tally, count_topic
from crawlbench.common import PARTITIONS, TOLERANCE_S, WINDOW_DAYS, BenchError
from crawlbench.source import SourceAdmin

MODES = ("at_least_once", "exactly_once")
# The data sets' dates lie within this many days before their reference time, well inside the crawl's
# WINDOW_DAYS window: every record is expected, whatever minute a run starts.
DATA_DAYS = 3
RETRIES = 30
RETRY_DELAY_S = 3


@dataclass(frozen=True)
class Shape:
    """The size and pace of a scenario's crawl: records at first and appended before each later run, batch size,
    source latency per page (so a fault lands mid-run), chunks run in parallel."""

    total: int = 8_000
    append: int = 5_000
    batch: int = 100
    latency_ms: int = 250
    chunks: int = 2


@dataclass
class Flight:
    """One crawl task of a scenario, in one delivery mode, and what happened to it."""

    task_id: str
    mode: str
    kafka_conn: str
    bootstrap: str
    pg_conn: str
    pg_uri: str
    replication: int = 1
    runs: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    kills: int = 0
    injected: str = ""
    batches: BatchBounds = field(default_factory=BatchBounds)

    @property
    def dag_id(self) -> str:
        return f"crawl_{self.task_id}"

    @property
    def topic(self) -> str:
        return f"chaos.{self.task_id}"


def task_entry(flight: Flight, shape: Shape) -> dict[str, Any]:
    """The flight's crawl task: Airflow retries a failed chunk after a short delay (the recovery path measured)."""
    return {
        "id": flight.task_id,
        "name": f"chaos {flight.task_id}",
        "source": {
            "task": flight.task_id,
            "concurrency": 1,
            "backoff_s": 0.2,
            "max_backoff_s": 2.0,
            "requests_per_s": None,
            "max_in_flight": None,
        },
        "batch_size": shape.batch,
        "filter": {"days": WINDOW_DAYS, "future_tolerance_hours": TOLERANCE_S / 3600},
        "kafka": {
            "conn_id": flight.kafka_conn,
            "topic": flight.topic,
            "partitions": PARTITIONS,
            "replication_factor": flight.replication,
            "delivery": flight.mode,
        },
        "postgres_conn_id": flight.pg_conn,
        "schedule": None,
        "retries": RETRIES,
        "retry_delay_s": RETRY_DELAY_S,
        "max_chunks": shape.chunks,
        "max_parallel_chunks": shape.chunks,
        "min_batches_per_chunk": 5,
    }


def create_data(admin: SourceAdmin, flight: Flight, shape: Shape, **faults: Any) -> None:
    """A fresh data set around now; appended records come a second apart, so none is dated in the future."""
    ref = datetime.now(UTC).replace(microsecond=0).isoformat()
    body = {"total": shape.total, "ref": ref, "window_days": DATA_DAYS, "in_window_share": 1.0, "append_step_s": 1}
    admin.put(flight.task_id, **body)
    admin.set_faults(flight.task_id, latency_ms=shape.latency_ms, **faults)


def run_progress(flight: Flight) -> float:
    """Share of the current run's planned batches fetched so far (0 before its plan)."""
    if not flight.runs:
        return 0.0
    # The first plan of a fresh database creates the schema.
    with contextlib.suppress(psycopg.errors.UndefinedTable), psycopg.connect(flight.pg_uri, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT pages, planned FROM crawler_ops.crawl_run WHERE task_id = %s AND run_id = %s",
            (flight.task_id, flight.runs[-1]),
        ).fetchone()
        return row[0] / row[1] if row and row[1] else 0.0
    return 0.0


def run_refs(flight: Flight) -> list[datetime]:
    """The reference time each of the flight's runs filtered against (recorded by its plan)."""
    with psycopg.connect(flight.pg_uri, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT ref_time FROM crawler_ops.crawl_run WHERE task_id = %s AND run_id = ANY(%s)",
            (flight.task_id, flight.runs),
        ).fetchall()
    return [row[0] for row in rows]


def expected_records(admin: SourceAdmin, flight: Flight) -> frozenset[str]:
    """The records the flight's runs were to publish: the source's ground truth at each run's reference time."""
    refs = run_refs(flight)
    if not refs:
        raise BenchError(f"{flight.task_id}: no run recorded a plan in crawler_ops.crawl_run")
    return frozenset().union(*(admin.truth(flight.task_id, ref) for ref in refs))


def count_flight(admin: SourceAdmin, flight: Flight) -> tuple[int, dict[str, Tally]]:
    """Expected records and what each consumer isolation level sees in the flight's topic."""
    expected = expected_records(admin, flight)
    return len(expected), count_topic(flight.bootstrap, flight.topic, expected, flight.batches)


def wait_until(what: str, ready: Any, deadline: float, poll_s: float = 0.5) -> None:
    """Poll ``ready()`` until it is true; BenchError naming ``what`` at ``deadline`` (monotonic seconds)."""
    while not ready():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(poll_s)
