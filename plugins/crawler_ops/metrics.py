"""Crawl counters through Airflow's metrics (StatsD, Datadog or OpenTelemetry, as ``[metrics]`` enables).

Names are ``crawler_ops.<task id>.<counter>`` with the task also as tag ``task_id``, so plain StatsD
(which drops tags) and tagged backends can both tell tasks apart; the counters are
:data:`crawler_ops.results.METRIC_COUNTERS`. With metrics off these calls do nothing.
"""

from __future__ import annotations

import logging

from airflow.sdk.observability import stats

log = logging.getLogger(__name__)


def count(task_id: str, counter: str, value: int) -> None:
    """Add ``value`` to a counter of ``task_id``; a metrics backend problem is logged, never raised."""
    if value <= 0:
        return
    try:
        stats.incr(f"crawler_ops.{task_id}.{counter}", count=value, tags={"task_id": task_id})
    except Exception:  # metrics must never fail a crawl
        log.warning("metrics: could not emit crawler_ops.%s.%s", task_id, counter, exc_info=True)
