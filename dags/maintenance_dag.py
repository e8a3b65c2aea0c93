"""Airflow DAG file: ``crawler_ops_maintenance``, the retention DAG, from the ``maintenance`` block of the config.

Thin on purpose: the pruning lives in ``crawler_ops.ops.maintenance``; no database access at parse time.
"""

from __future__ import annotations

from crawler_ops.factory.maintenance import build_maintenance_dags

globals().update(build_maintenance_dags())
