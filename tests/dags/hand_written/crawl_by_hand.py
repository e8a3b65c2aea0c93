"""A crawl DAG written by hand from the package's steps (:mod:`crawler_ops.operators.crawl`), as a user would write
one: the same four steps the factory wires, plus a task of its own that reads the run summary.

The crawl task comes from the YAML config ($CRAWLER_OPS_CONFIG) by the id in $CRAWLER_OPS_HAND_WRITTEN_TASK; with no
such variable this file defines no DAG, so a dags folder can hold it without crawling anything.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import DAG, task

from crawler_ops.config import CrawlTaskConfig, load_config
from crawler_ops.crawl.run import RunParams
from crawler_ops.operators import AnnounceCrawlOperator, CommitCrawlOperator, CrawlChunkOperator, PlanCrawlOperator


def build_crawl_by_hand(cfg: CrawlTaskConfig) -> DAG:
    """The DAG ``by_hand_<id>``: plan -> crawl_chunk (mapped) -> commit -> announce, and ``report`` after commit."""
    with DAG(
        dag_id=f"by_hand_{cfg.id}",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        # Paused until someone unpauses it: it shares its task's watermark with the factory's crawl_<id>.
        is_paused_upon_creation=True,
        params=RunParams.airflow_params(),
        tags=["crawler_ops", "crawl", "hand-written"],
        default_args={"retries": 0},
    ) as dag:
        plan = PlanCrawlOperator(crawl=cfg)
        chunks = CrawlChunkOperator.over(plan, crawl=cfg)
        commit = CommitCrawlOperator(crawl=cfg)
        plan >> chunks >> commit >> AnnounceCrawlOperator(crawl=cfg)
        plan >> commit

        @task
        def report(summary: dict[str, Any]) -> str:
            return f"{summary['published']} records published, watermark {summary['new_watermark']}"

        report(commit.output)
    return dag


if task_id := os.environ.get("CRAWLER_OPS_HAND_WRITTEN_TASK"):
    crawl_by_hand = build_crawl_by_hand(next(t for t in load_config().tasks if t.id == task_id))
