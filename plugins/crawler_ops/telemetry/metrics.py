"""Crawl counters and gauges through Airflow's metrics (StatsD, Datadog or OpenTelemetry, as ``[metrics]`` enables).

Names carry the task, so plain StatsD (which drops tags) can tell tasks apart; the task is also tag ``task_id``
(``executor`` for executors) for tagged backends. Every name the package emits is built here from the tuples below,
which are also what ``include/deploy/monitoring/statsd_mapping.yml`` and the Grafana dashboard are checked
against:

- ``crawler_ops.<task>.<counter>``, counters per finished batch (:data:`~crawler_ops.results.METRIC_COUNTERS`);
- ``crawler_ops.<task>.<gauge>``, per crawl task (:data:`TASK_GAUGES`), and
  ``crawler_ops.<task>.consumer_lag.<group>`` per configured consumer group (:data:`GROUP_GAUGES`);
- ``crawler_ops_executor.<name>.rows.<status>`` and ``crawler_ops_executor.<name>.<gauge>`` per executor
  (:data:`EXECUTOR_GAUGES`), under their own prefix so an executor and a crawl task of the same name never mix.

A name part may hold only letters, digits, ``_`` and ``-`` (StatsD splits names on dots): a dot becomes ``__``
(as Airflow does for its own legacy names) and anything else ``_``. With metrics off these calls do nothing.
"""

from __future__ import annotations

import logging
import re

from airflow.sdk.observability import stats

from crawler_ops.hooks.store.status_table import STATUS_NAMES
from crawler_ops.results import METRIC_COUNTERS

log = logging.getLogger(__name__)

TASK_GAUGES = (
    "backlog",  # records not crawled yet: the source's total (live when it answered, else stored) - the watermark
    "total",  # the total stored by the last commit
    "source_total",  # the source's total asked now (absent when the source did not answer)
    "watermark",
    "parked_batches",
    "seconds_since_success",  # since the last successful run finished (absent before the first one)
    "last_run_duration_s",  # the last finished run's
    "last_run_records_per_s",  # the last finished run's fetched records per second
    "scrape_errors",  # lookups of this task that failed in this round (PostgreSQL, source, Kafka)
)
GROUP_GAUGES = ("consumer_lag",)
EXECUTOR_GAUGES = ("scrape_errors",)
EXECUTOR_ROW_STATUSES = tuple(STATUS_NAMES.values())
TASK_PREFIX = "crawler_ops"
EXECUTOR_PREFIX = "crawler_ops_executor"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def name_part(value: str) -> str:
    """``value`` as one part of a StatsD name (see the module docstring)."""
    return _UNSAFE.sub("_", value.replace(".", "__"))


def task_metric(task_id: str, name: str, group: str | None = None) -> str:
    """The name of a crawl task's counter or gauge; ``group``: the consumer group of a :data:`GROUP_GAUGES` one."""
    stat = f"{TASK_PREFIX}.{name_part(task_id)}.{name}"
    return stat if group is None else f"{stat}.{name_part(group)}"


def executor_metric(executor: str, name: str, status: str | None = None) -> str:
    """The name of an executor's gauge; ``status``: rows in that status (``name`` is then ``rows``)."""
    stat = f"{EXECUTOR_PREFIX}.{name_part(executor)}.{name}"
    return stat if status is None else f"{stat}.{status}"


def emitted_names(task_id: str, group: str, executor: str) -> list[str]:
    """Every name the package emits, for one crawl task with one consumer group and one executor."""
    names = [task_metric(task_id, name) for name in (*METRIC_COUNTERS, *TASK_GAUGES)]
    names += [task_metric(task_id, name, group) for name in GROUP_GAUGES]
    names += [executor_metric(executor, "rows", status) for status in EXECUTOR_ROW_STATUSES]
    return names + [executor_metric(executor, name) for name in EXECUTOR_GAUGES]


def count(task_id: str, counter: str, value: int) -> None:
    """Add ``value`` to a counter of ``task_id``; a metrics backend problem is logged, never raised."""
    if value <= 0:
        return
    try:
        stats.incr(task_metric(task_id, counter), count=value, tags={"task_id": task_id})
    except Exception:  # metrics must never fail a crawl
        log.warning("metrics: could not emit %s", task_metric(task_id, counter), exc_info=True)


def gauge(stat: str, value: float, tags: dict[str, str]) -> None:
    """Set a gauge; a metrics backend problem is logged, never raised."""
    try:
        stats.gauge(stat, value, tags=tags)
    except Exception:  # metrics must never fail the caller
        log.warning("metrics: could not emit %s", stat, exc_info=True)
