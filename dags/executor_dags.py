"""Airflow DAG file: one generated ``exec_<name>`` DAG per enabled executor in $CRAWLER_OPS_CONFIG.

The old Azkaban/cron task executor: a status table drives a user function over a source table's rows.
Thin on purpose: no network or database access at parse time.
"""

from __future__ import annotations

from crawler_ops.factory.executor import build_executor_dags

globals().update(build_executor_dags())
