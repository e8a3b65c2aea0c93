"""Reads of an Airflow metadata DB (SQLite or PostgreSQL, by its SQLAlchemy URL) after or during a run: each
task instance's timings and the return value every mapped ``crawl_chunk`` pushed to XCom, the source of a
chunk's records/s."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from crawlbench.sampling import TreeMemory

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

TASK_ORDER = ("plan", "crawl_chunk", "commit")
Moment = datetime | str | None


@cache
def engine(url: str) -> Engine:
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    return create_engine(url, poolclass=NullPool)


def metadata_rows(url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    """A read of the metadata DB at ``url``; a list parameter expands (``IN :names``)."""
    from sqlalchemy import bindparam, text

    query = text(statement)
    lists = [name for name, value in params.items() if isinstance(value, list | tuple)]
    if lists:
        query = query.bindparams(*(bindparam(name, expanding=True) for name in lists))
    with engine(url).connect() as conn:
        return [tuple(row) for row in conn.execute(query, params)]


def utc(value: Moment) -> float | None:
    """Epoch seconds of a metadata timestamp: a datetime (PostgreSQL) or naive-UTC text (SQLite)."""
    if not value:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def chunk_results(db: str, dag_id: str) -> dict[int, dict[str, Any]]:
    """The return value of each mapped ``crawl_chunk`` task instance of the DAG's newest run, by map index.

    XCom values are JSON in ``xcom.value`` (text on SQLite, decoded already from PostgreSQL's jsonb).
    """
    rows = metadata_rows(
        db,
        "SELECT map_index, value FROM xcom WHERE dag_id = :dag AND task_id = 'crawl_chunk' "
        "AND key = 'return_value' AND dag_run_id = (SELECT max(id) FROM dag_run WHERE dag_id = :dag)",
        dag=dag_id,
    )
    results = {
        int(index): json.loads(value) if isinstance(value, str | bytes) else value
        for index, value in rows
        if value is not None
    }
    return {index: value for index, value in results.items() if isinstance(value, dict)}


def chunk_figures(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the reports show of a chunk's return value. Its records/s is ``fetched / elapsed_s``: unknown
    (None) when the chunk did not report ``elapsed_s``, or no return value was found."""
    result = result or {}
    elapsed = result.get("elapsed_s")
    known = isinstance(elapsed, int | float) and elapsed > 0 and isinstance(result.get("fetched"), int)
    return {
        "label": result.get("label"),
        "batches": result.get("batches_done"),
        "fetched": result.get("fetched"),
        "elapsed_s": elapsed if known else None,
        "records_per_s": result["fetched"] / elapsed if known else None,
    }


def add_chunk_figures(
    rows: Iterable[dict[str, Any]], results: Mapping[int, Mapping[str, Any]], names: Sequence[str] = ()
) -> None:
    """Add to each ``crawl_chunk`` row the figures of its return value (:func:`chunk_figures`; only
    ``names`` of them when given)."""
    for row in rows:
        if row["task"] == "crawl_chunk":
            figures = chunk_figures(results.get(row["map_index"]))
            row.update({k: v for k, v in figures.items() if k in names} if names else figures)


def dag_run(db: str, dag_id: str) -> tuple[Any, ...] | None:
    """State, queued, start and end of the DAG's run (the newest)."""
    query = "SELECT state, queued_at, start_date, end_date FROM dag_run WHERE dag_id = :dag ORDER BY id DESC"
    rows = metadata_rows(db, query, dag=dag_id)
    return rows[0] if rows else None


def run_times(queued: Moment, start: Moment, end: Moment) -> dict[str, float | None]:
    q, s, e = utc(queued), utc(start), utc(end)
    return {
        "queued_to_start_s": (s - q) if q and s else None,
        "run_s": (e - s) if s and e else None,
    }


def task_instances(db: str, dag_id: str, memory: TreeMemory) -> list[dict[str, Any]]:
    """Per task instance of the DAG's newest run: executor latency (queued->start), duration, its process's peak
    RSS."""
    rows = metadata_rows(
        db,
        "SELECT task_id, map_index, queued_dttm, start_date, end_date, pid, state FROM task_instance "
        "WHERE dag_id = :dag AND run_id = (SELECT run_id FROM dag_run WHERE dag_id = :dag ORDER BY id DESC LIMIT 1) "
        "ORDER BY start_date",
        dag=dag_id,
    )
    ends: dict[str, float] = {}
    for task_id, _, _, _, end, _, _ in rows:
        ends[task_id] = max(ends.get(task_id, 0.0), utc(end) or 0.0)
    return [task_instance(row, ends, memory) for row in rows]


def task_instance(row: tuple[Any, ...], ends: Mapping[str, float], memory: TreeMemory) -> dict[str, Any]:
    task_id, map_index, queued, start, end, pid, state = row
    q, s, e = utc(queued), utc(start), utc(end)
    ready = upstream_done(task_id, ends)
    return {
        "task": task_id,
        "map_index": map_index,
        "state": state,
        "since_upstream_done_s": (s - ready) if s and ready else None,
        "queued_to_start_s": (s - q) if q and s else None,
        "duration_s": (e - s) if s and e else None,
        "peak_rss_mb": memory.per_pid.get(pid, 0) / 2**20 if pid else None,
    }


def upstream_done(task_id: str, ends: Mapping[str, float]) -> float | None:
    """When the tasks before ``task_id`` in plan -> crawl_chunk -> commit had all finished."""
    if task_id not in TASK_ORDER:
        return None
    before = [ends[t] for t in TASK_ORDER[: TASK_ORDER.index(task_id)] if ends.get(t)]
    return max(before) if before else None
