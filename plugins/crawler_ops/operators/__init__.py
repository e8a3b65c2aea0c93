"""Operators a DAG uses, the way a provider package ships them: the steps of a crawl run
(:mod:`.crawl`: plan, crawl_chunk, commit, announce), their failure policy (:mod:`.failures`) and the OpenLineage
datasets the chunk step reports (:mod:`.lineage`)."""

from __future__ import annotations

from crawler_ops.operators.crawl import (
    ANNOUNCE,
    COMMIT,
    CRAWL_CHUNK,
    PLAN,
    AnnounceCrawlOperator,
    CommitCrawlOperator,
    CrawlChunkOperator,
    CrawlStepOperator,
    PlanCrawlOperator,
)

__all__ = [
    "ANNOUNCE",
    "COMMIT",
    "CRAWL_CHUNK",
    "PLAN",
    "AnnounceCrawlOperator",
    "CommitCrawlOperator",
    "CrawlChunkOperator",
    "CrawlStepOperator",
    "PlanCrawlOperator",
]
