"""The per-task status view: progress, counts, runs, errors and lag, from PostgreSQL, the source, Kafka and Airflow.

Used by ``python -m crawler_ops status`` and by the status endpoint in Airflow's api-server
(:mod:`crawler_ops.ops.web`). Every part is gathered on its own: a source or broker that does not answer shows
as an error on that task instead of hiding the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import UTC, datetime
from functools import partial
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from crawler_ops.config import CrawlTaskConfig, LoadedConfig
from crawler_ops.executor import executor_status
from crawler_ops.hooks.http import deadline
from crawler_ops.hooks.kafka.producer import IdempotentProducerHook
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.source.paging import Paging
from crawler_ops.hooks.source.tokens import token_for
from crawler_ops.hooks.store.bounded import (
    CONNECT_TIMEOUT_S,
    LOCK_TIMEOUT_MS,
    STATEMENT_TIMEOUT_MS,
    BoundedSessions,
)
from crawler_ops.hooks.store.reports import CrawlReportHook
from crawler_ops.hooks.store.status_table import STATUS_NAMES
from crawler_ops.results import RECORD_COUNTERS

log = logging.getLogger(__name__)

# The status app answers a report within this many seconds whatever its sources, brokers and databases do (what has
# not answered by then shows as an error on its row); in the CLI each live call ends within it.
STATUS_DEADLINE_S = 5.0
# Live calls (sources, Kafka) end this much before the report's deadline, so their errors make it into the report.
LIVE_MARGIN_S = 0.25
# A status-view connection that is not open within this many seconds fails (a part left connecting at the deadline
# ends within it).
STATUS_CONNECT_TIMEOUT_S = CONNECT_TIMEOUT_S
SET_TIMEOUTS = "SELECT set_config('statement_timeout', :statement, true), set_config('lock_timeout', :lock, true)"
HISTORY_RUNS = 30  # finished runs in a task's history (the status page's charts)
RUN_FIELDS = (
    "run_id",
    "mode",
    "status",
    "started_at",
    "finished_at",
    "duration_s",
    "planned",
    *RECORD_COUNTERS,
    "errors",
    "last_error",  # the newest of the run's errors: why a failed run failed
)


def collect(
    loaded: LoadedConfig,
    task_id: str | None = None,
    live: bool = True,
    executor: str | None = None,
    end: float | None = None,
    history: bool = False,
) -> dict[str, Any]:
    """The status of every crawl task of ``loaded`` (or of ``task_id``) and of every executor (or of
    ``executor``: rows per status and the latest parked rows), plus invalid entries' config errors. Naming
    one crawl task shows no executor, and naming one executor no crawl task.

    :param live: also ask each source for its current total and Kafka for consumer lag.
    :param end: the monotonic time by which the report is answered, whatever has not answered by then an error
        on its row; default: no deadline for the report, each live call ``STATUS_DEADLINE_S`` from its start (the
        CLI, which waits for every row of a large config).
    :param history: also give each crawl task's ``history`` (see :func:`run_history`), for the HTML page.
    :raises KeyError: when ``task_id`` or ``executor`` names nothing configured.
    """
    tasks = [t for t in loaded.tasks if executor is None and (task_id is None or t.id == task_id)]
    invalid = {k: v for k, v in loaded.errors.items() if executor is None and (task_id is None or k == task_id)}
    if task_id is not None and not tasks and not invalid:
        raise KeyError(task_id)
    executors = [e for e in loaded.executors if task_id is None and (executor is None or e.name == executor)]
    bad = {k: v for k, v in loaded.executor_errors.items() if task_id is None and (executor is None or k == executor)}
    if executor is not None and not executors and not bad:
        raise KeyError(executor)
    late = f"no answer within the status deadline of {STATUS_DEADLINE_S:g}s"
    live_end = None if end is None else end - LIVE_MARGIN_S
    # Each part of each row runs on its own, so a source that does not answer costs only its own fields.
    parts: dict[tuple[str, int], Part] = {("runs", 0): partial(active_runs, [t.dag_id for t in tasks])}
    for i, t in enumerate(tasks):
        parts["stored", i] = partial(stored_status, t)
        if live:
            parts["source", i] = partial(source_total, t, live_end)
            parts["kafka", i] = partial(kafka_status, t, live_end)
        if history:
            parts["history", i] = partial(run_history, t)
    for i, e in enumerate(executors):
        parts["executor", i] = partial(executor_status, e)
    got = gather(parts, end)
    running, running_error = got["runs", 0] or (None, late)
    rows = [
        task_row(
            t,
            running,
            running_error,
            got["stored", i] or {"status": "unknown", "db_error": late},
            (got["source", i] or {"source_total": None, "source_error": late}) if live else None,
            (got["kafka", i] or {"error": late}) if live else None,
        )
        for i, t in enumerate(tasks)
    ]
    for i, row in enumerate(rows if history else ()):
        found = got["history", i] or {"current_run": None, "runs": [], "error": late}
        row["history"] = found if row.get("running") is not False else {**found, "current_run": None}
    return {
        "generated_at": datetime.now(UTC).isoformat(),
        "tasks": rows,
        "invalid_tasks": [{"task_id": k, "error": v} for k, v in sorted(invalid.items())],
        "executors": [
            got["executor", i] or {"name": e.name, "dag_id": e.dag_id, "status_table": e.status_table, "db_error": late}
            for i, e in enumerate(executors)
        ],
        "invalid_executors": [{"name": k, "error": v} for k, v in sorted(bad.items())],
    }


Part = Callable[[], Any]


def gather(parts: Mapping[tuple[str, int], Part], end: float | None) -> dict[tuple[str, int], Any]:
    """Run the parts of a report in parallel until ``end`` (a monotonic time; None: until all answered): their
    answers, None for a part that has not answered by then."""
    # Not a `with` block: leaving one waits for every thread. A part still running at the deadline is left to end
    # on its own, soon: its PostgreSQL connections are shut (it fails and closes them) or still connecting (within
    # their connect timeout); live calls are bounded by the same deadline.
    sessions = BoundedSessions(end)
    pool = ThreadPoolExecutor(max(1, min(8, len(parts))), thread_name_prefix="status")
    try:
        futures = {name: pool.submit(run_bounded, sessions, part) for name, part in parts.items()}
        wait(futures.values(), timeout=None if end is None else max(0.0, end - time.monotonic()))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        sessions.abort()
    return {name: f.result() if f.done() and not f.cancelled() else None for name, f in futures.items()}


def run_bounded(sessions: BoundedSessions, part: Part) -> Any:
    with sessions.active():
        return part()


def task_row(
    cfg: CrawlTaskConfig,
    running: Mapping[str, list[str]] | None,
    running_error: str | None,
    stored: dict[str, Any],
    source: dict[str, Any] | None,
    kafka: dict[str, Any] | None,
) -> dict[str, Any]:
    """One task's row from its parts: each fills its own fields or an ``*_error`` field (live parts are None when
    not asked)."""
    row: dict[str, Any] = {
        "task_id": cfg.id,
        "task_name": cfg.name or cfg.id,
        "dag_id": cfg.dag_id,
        "topic": cfg.kafka.topic,
        "running": None if running is None else bool(running.get(cfg.dag_id)),
        "active_runs": None if running is None else running.get(cfg.dag_id, []),
    }
    if running_error:
        row["running_error"] = running_error
    row.update(stored)
    last_run = row.get("last_run")
    if last_run and last_run["status"] == "running" and row["running"] is False:
        # Marked failed in the UI, or its commit never ran: the row stays 'running' in PostgreSQL.
        last_run["status"] = "abandoned"
    if source is not None:
        row.update(source)
    if kafka is not None:
        row["kafka"] = kafka
    total = row.get("source_total", row.get("total"))
    watermark = row.get("watermark")
    row["progress"] = f"{100.0 * watermark / total:.1f}%" if total and watermark is not None else "-"
    return row


def stored_status(cfg: CrawlTaskConfig) -> dict[str, Any]:
    """Watermark and counters, batch rows by status, the last run and recent errors from PostgreSQL."""
    reports = CrawlReportHook(cfg.postgres_conn_id, cfg.id)
    try:
        with reports.transaction() as cur:
            view = reports.status_view(cur)
    except Exception as exc:  # noqa: BLE001 - one task's database problem must not hide the others
        return {"status": "unknown", "db_error": f"{type(exc).__name__}: {exc}"}
    finally:
        reports.close()
    if view is None:
        return {"status": "never run", "watermark": None}
    progress = view["progress"] or {"status": "never run", "watermark": None}
    last_run = view["last_run"]
    return {
        **{k: iso(v) for k, v in progress.items()},
        "batches": {STATUS_NAMES.get(int(k), str(k)): int(v) for k, v in view["batches"].items()},
        "last_run": {k: iso(last_run.get(k)) for k in RUN_FIELDS} if last_run else None,
        "drift": drift_row(view["drift"]),
        "errors_24h": view["errors"] or {},
        "parked": [parked.describe() for parked in view["parked"]],
    }


def drift_row(found: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The newest field drift (:meth:`crawler_ops.drift.Drift.to_json`) with the run that found it; None before a
    commit found one."""
    if not found:
        return None
    run = {"run_id": found["run_id"], "status": found["status"], "finished_at": iso(found["finished_at"])}
    return {**run, **found["drift"]}


def run_history(cfg: CrawlTaskConfig) -> dict[str, Any]:
    """The run in progress (``current_run``: batches done of planned, percent) and the last
    :data:`HISTORY_RUNS` finished runs (``runs``, oldest first) with their records per second; or ``error``."""
    reports = CrawlReportHook(cfg.postgres_conn_id, cfg.id)
    try:
        with reports.transaction() as cur:
            found = reports.run_history(cur, HISTORY_RUNS)
    except Exception as exc:  # noqa: BLE001 - shown on the task's row, like the other database errors
        return {"current_run": None, "runs": [], "error": f"{type(exc).__name__}: {exc}"}
    finally:
        reports.close()
    if found is None:
        return {"current_run": None, "runs": []}
    current = found["current_run"]
    if current is not None:
        planned, done = int(current["planned"]), int(current["done"])
        percent = min(100.0, 100.0 * done / planned) if planned else None
        current = {**{k: iso(v) for k, v in current.items()}, "done": done, "percent": percent}
    runs = [
        {
            **{k: iso(v) for k, v in run.items()},
            "records_per_s": round(run["fetched"] / run["duration_s"], 1) if run["duration_s"] else None,
        }
        for run in reversed(found["runs"])
    ]
    return {"current_run": current, "runs": runs}


def iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def source_total(cfg: CrawlTaskConfig, end: float | None = None) -> dict[str, Any]:
    """The source's current total, asked once (no retries), answered or failed by ``end`` (a monotonic time;
    default: the status deadline from now); none for a feed (walked page after page, it has no total) or a source
    without a count endpoint."""
    from crawler_ops.crawl.steps import strategy_for

    if not strategy_for(cfg).has_total or cfg.source.count_path is None:
        # Without a count endpoint the total is found by probing pages, a dozen requests or more: only a run's plan
        # spends them (within the connection's rate budget), and the report shows the total that plan found.
        return {"source_total": None}
    left = STATUS_DEADLINE_S if end is None else end - time.monotonic()
    quick = cfg.source.model_copy(update={"max_retries": 0, "timeout_s": min(cfg.source.timeout_s, STATUS_DEADLINE_S)})
    source = SourceApiHook(
        quick, cfg.id, cfg.source_task, paging=Paging.of_task(cfg), token=token_for(quick, cfg.postgres_conn_id)
    )
    try:
        with deadline(left):
            return {"source_total": source.get_total()}
    except Exception as exc:  # noqa: BLE001 - shown on the task's row
        return {"source_total": None, "source_error": f"{type(exc).__name__}: {exc}"}
    finally:
        source.close()


def kafka_status(cfg: CrawlTaskConfig, end: float | None = None) -> dict[str, Any]:
    """Messages in the topic and, per configured consumer group, its committed offsets' lag; each admin call
    waits at most what is left until ``end`` (a monotonic time; default: the status deadline from now)."""
    timeout = STATUS_DEADLINE_S if end is None else max(0.1, end - time.monotonic())
    try:
        admin = IdempotentProducerHook(cfg.kafka.conn_id).admin()
        return topic_lag(admin, cfg.kafka.topic, cfg.kafka.consumer_groups, timeout)
    except Exception as exc:  # noqa: BLE001 - shown on the task's row
        return {"error": f"{type(exc).__name__}: {exc}"}


def topic_lag(admin: AdminClient, topic: str, groups: Sequence[str], timeout: float) -> dict[str, Any]:
    """Per group: lag = end offset - committed offset per partition (from the earliest when nothing committed)."""
    metadata = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return {"error": f"topic '{topic}' does not exist yet", "groups": {}}
    partitions = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
    end = list_offsets(admin, partitions, OffsetSpec.latest(), timeout)
    start = list_offsets(admin, partitions, OffsetSpec.earliest(), timeout)
    result: dict[str, Any] = {"messages": sum(end.values()) - sum(start.values()), "end_offset": sum(end.values())}
    lags: dict[str, Any] = {}
    requests = [ConsumerGroupTopicPartitions(g, list(partitions)) for g in groups]
    futures = {}
    for request in requests:  # the admin API takes one group per request
        futures.update(admin.list_consumer_group_offsets([request], request_timeout=timeout))
    for group, future in futures.items():
        try:
            committed = {tp.partition: tp.offset for tp in future.result(timeout=timeout).topic_partitions}
        except KafkaException as exc:
            lags[group] = {"error": str(exc)}
            continue
        per_partition = {p: end[p] - (committed[p] if committed.get(p, -1) >= 0 else start[p]) for p in sorted(end)}
        lags[group] = {
            "lag": sum(per_partition.values()),
            "committed": sum(max(committed.get(p, -1), 0) for p in end),
            "partitions": per_partition,
        }
    result["groups"] = lags
    return result


def list_offsets(
    admin: AdminClient, partitions: Iterable[TopicPartition], spec: OffsetSpec, timeout: float
) -> dict[int, int]:
    futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=timeout)
    return {tp.partition: int(future.result(timeout=timeout).offset) for tp, future in futures.items()}


def active_runs(dag_ids: Sequence[str]) -> tuple[dict[str, list[str]] | None, str | None]:
    """Queued or running DAG runs per DAG id from Airflow's metadata DB (None and the reason when unreadable)."""
    if not dag_ids:
        return {}, None
    try:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from airflow.utils.state import DagRunState
        from sqlalchemy import select, text

        query = select(DagRun.dag_id, DagRun.run_id).where(
            DagRun.dag_id.in_(list(dag_ids)), DagRun.state.in_([DagRunState.RUNNING, DagRunState.QUEUED])
        )
        runs: dict[str, list[str]] = {}
        with create_session() as session:
            if session.get_bind().dialect.name == "postgresql":
                # Airflow's pool owns the connection; bound this transaction's statements like the view's own.
                session.execute(
                    text(SET_TIMEOUTS), {"statement": str(STATEMENT_TIMEOUT_MS), "lock": str(LOCK_TIMEOUT_MS)}
                )
            for dag_id, run_id in session.execute(query).all():
                runs.setdefault(dag_id, []).append(run_id)
        return runs, None
    except Exception as exc:  # noqa: BLE001 - the rest of the view is still useful
        log.warning("status: cannot read Airflow's DAG runs: %s", exc)
        return None, f"Airflow metadata DB not readable here: {type(exc).__name__}: {exc}"
