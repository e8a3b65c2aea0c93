"""Airflow DAG file: one generated ``crawl_<id>`` DAG per enabled task in $CRAWLER_OPS_CONFIG.

Thin on purpose: reads the config (include/crawler_tasks.yaml by default) and calls the factory; no
network or database access at parse time.
"""

from __future__ import annotations

from crawler_ops.factory.crawl import build_crawl_dags

globals().update(build_crawl_dags())
