"""Airflow DAG file: ``crawler_ops_gauges``, per-task gauges for dashboards (when ``maintenance.gauges_schedule``
is set).

Thin on purpose: the lookups live in ``crawler_ops.ops.gauges``; no database or network access at parse time.
"""

from __future__ import annotations

from crawler_ops.factory.gauges import build_gauges_dags

globals().update(build_gauges_dags())
