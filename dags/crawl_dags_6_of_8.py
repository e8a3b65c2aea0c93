"""Airflow DAG file: the crawl DAGs of shard 6 of 8 (`python -m crawler_ops dag-shards` wrote it).

Thin on purpose: reads the config and builds only this shard's ``crawl_<id>`` DAGs; no I/O at parse time.
"""

from __future__ import annotations

from crawler_ops.factory.crawl import build_crawl_dags

globals().update(build_crawl_dags(shard_file=__file__))
