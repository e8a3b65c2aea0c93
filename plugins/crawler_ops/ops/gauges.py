"""Per-task gauges for dashboards and alerts, emitted every few minutes by the DAG ``crawler_ops_gauges``.

Per crawl task: backlog, stored total, the source's live total, watermark, parked batches, seconds since the last
successful run, the last finished run's duration and records per second, consumer lag per configured group, and
``scrape_errors``; per executor: rows by status and ``scrape_errors`` (names: :mod:`crawler_ops.telemetry.metrics`).

Cheap by construction: per crawl database one statement per table (progress, batch rows, run history) for all its
tasks; per executor one count on its status table; per crawl task one count request to the source and, when it lists
consumer groups, one offsets lookup in Kafka, each with the status view's short timeout and no retries, a few tasks
at a time. A lookup that fails (a database, a source or a broker down) is logged and counted in that task's
``scrape_errors`` gauge instead of failing the round, so one broken source never hides the other tasks' gauges.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from crawler_ops.config import CrawlTaskConfig, ExecutorTaskConfig, LoadedConfig
from crawler_ops.executor import executor_hook
from crawler_ops.executor.tables import resolve_tables
from crawler_ops.hooks.store.reports import CrawlReportHook
from crawler_ops.ops.status import kafka_status, source_total
from crawler_ops.telemetry import metrics

log = logging.getLogger(__name__)
LIVE_WORKERS = 8  # tasks whose source and broker are asked at the same time


@dataclass
class Gauges:
    """One task's or executor's gauge values of a round, and the lookups that failed."""

    values: dict[str, float] = field(default_factory=dict)
    lags: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**self.values, "consumer_lag": self.lags, "errors": self.errors}


def stored_rows(tasks: Sequence[CrawlTaskConfig]) -> dict[str, dict[str, Any] | str]:
    """Stored values per task id, read once per crawl database; a database that fails gives its tasks the error."""
    by_db: dict[str, list[str]] = {}
    for cfg in tasks:
        by_db.setdefault(cfg.postgres_conn_id, []).append(cfg.id)
    found: dict[str, dict[str, Any] | str] = {}
    for conn_id, ids in by_db.items():
        reports = CrawlReportHook(conn_id, "gauges")
        try:
            with reports.transaction() as cur:
                rows = reports.gauge_rows(cur, ids)
            found.update({task: rows.get(task, {}) for task in ids})
        except Exception as exc:  # noqa: BLE001 - counted as a scrape error of each task of this database
            found.update(dict.fromkeys(ids, f"PostgreSQL ({conn_id}): {type(exc).__name__}: {exc}"))
        finally:
            reports.close()
    return found


def task_gauges(cfg: CrawlTaskConfig, stored: dict[str, Any] | str, live: bool) -> Gauges:
    """One crawl task's gauges from its stored row and, with ``live``, its source and consumer groups."""
    gauges = Gauges()
    db_read = not isinstance(stored, str)
    if isinstance(stored, str):
        gauges.errors.append(stored)
        stored = {}
    for name in ("total", "watermark", "parked_batches", "seconds_since_success", "last_run_duration_s"):
        if stored.get(name) is not None:
            gauges.values[name] = float(stored[name])
    if db_read:
        gauges.values.setdefault("parked_batches", 0.0)
    duration, fetched = stored.get("last_run_duration_s"), stored.get("last_run_fetched")
    if duration and fetched is not None:
        gauges.values["last_run_records_per_s"] = fetched / duration
    if live:
        asked = source_total(cfg)
        if "source_error" in asked:
            gauges.errors.append(f"source: {asked['source_error']}")
        elif asked["source_total"] is not None:
            gauges.values["source_total"] = float(asked["source_total"])
        if cfg.kafka.consumer_groups:
            gauges.lags, lag_errors = consumer_lags(cfg)
            gauges.errors += lag_errors
    total = gauges.values.get("source_total", gauges.values.get("total"))
    if total is not None and db_read:  # no watermark stored yet: nothing is crawled
        gauges.values["backlog"] = max(0.0, total - gauges.values.get("watermark", 0.0))
    gauges.values["scrape_errors"] = float(len(gauges.errors))
    return gauges


def consumer_lags(cfg: CrawlTaskConfig) -> tuple[dict[str, float], list[str]]:
    """Lag per configured group; a topic not created yet has no lag to show (and is no error)."""
    found = kafka_status(cfg)
    if "groups" not in found:
        return {}, [f"Kafka: {found['error']}"]
    lags, errors = {}, []
    for group, lag in found["groups"].items():
        if "lag" in lag:
            lags[group] = float(lag["lag"])
        else:
            errors.append(f"Kafka group {group}: {lag['error']}")
    return lags, errors


def executor_gauges(cfg: ExecutorTaskConfig) -> Gauges:
    """An executor's rows per status (one count on its status table)."""
    gauges = Gauges()
    hook = executor_hook(cfg)
    try:
        with hook.transaction() as cur:
            counts = resolve_tables(cur, cfg).rows(cfg.name).counts(cur)
        gauges.values.update({f"rows.{status}": float(n) for status, n in counts.items()})
    except Exception as exc:  # noqa: BLE001 - counted as this executor's scrape error
        gauges.errors.append(f"PostgreSQL: {type(exc).__name__}: {exc}")
    finally:
        hook.close()
    gauges.values["scrape_errors"] = float(len(gauges.errors))
    return gauges


def collect(loaded: LoadedConfig, live: bool = True) -> tuple[dict[str, Gauges], dict[str, Gauges]]:
    """Gauges of every enabled crawl task and executor of ``loaded``, by task id and by executor name."""
    tasks = [t for t in loaded.tasks if t.enabled]
    stored = stored_rows(tasks)
    with ThreadPoolExecutor(max(1, min(LIVE_WORKERS, len(tasks)))) as pool:
        found = list(pool.map(lambda t: task_gauges(t, stored[t.id], live), tasks))
    crawl = {t.id: gauges for t, gauges in zip(tasks, found, strict=True)}
    executors = {e.name: executor_gauges(e) for e in loaded.executors if e.enabled}
    return crawl, executors


def emit(crawl: Mapping[str, Gauges], executors: Mapping[str, Gauges]) -> None:
    """Send the gauges through Airflow's metrics; failed lookups are logged."""
    for task_id, gauges in crawl.items():
        tags = {"task_id": task_id}
        for name, value in gauges.values.items():
            metrics.gauge(metrics.task_metric(task_id, name), value, tags)
        for group, lag in gauges.lags.items():
            metrics.gauge(metrics.task_metric(task_id, "consumer_lag", group), lag, {**tags, "group": group})
        for error in gauges.errors:
            log.warning("gauges: task %s: %s", task_id, error)
    for name, gauges in executors.items():
        for gauge_name, value in gauges.values.items():
            stat, _, status = gauge_name.partition(".")
            tags = {"executor": name, **({"status": status} if status else {})}
            metrics.gauge(metrics.executor_metric(name, stat, status or None), value, tags)
        for error in gauges.errors:
            log.warning("gauges: executor %s: %s", name, error)


def emit_gauges(loaded: LoadedConfig, live: bool = True) -> dict[str, Any]:
    """One round: collect and emit; returns the values (the task's XCom, for a look in the UI)."""
    crawl, executors = collect(loaded, live)
    emit(crawl, executors)
    failing = sorted(k for k, g in crawl.items() if g.errors) + sorted(k for k, g in executors.items() if g.errors)
    log.info(
        "gauges: %d crawl tasks, %d executors; lookups failed for: %s", len(crawl), len(executors), failing or "none"
    )
    return {
        "tasks": {k: g.to_dict() for k, g in crawl.items()},
        "executors": {k: g.to_dict() for k, g in executors.items()},
    }
