"""The three steps of a crawl run (plan, crawl_chunk, commit), as the run's crawl strategy does them.

A source is read one of two ways, chosen here and nowhere else, from its paginator's ``crawl``
(:mod:`crawler_ops.config.paginators`):

- :class:`OffsetBatches` (``offset``, ``page``): the source counts its records; a run plans the offsets above the
  watermark in batches, newest first, crawls them in parallel chunks (:mod:`.plan`, :mod:`.chunk`) and moves the
  watermark over the longest run of done batches (:func:`~crawler_ops.crawl.commit.advance_offsets`);
- :class:`Feed` (``cursor``, ``next_link``, ``link_header``): a newest-first feed walked page after page down to
  the last crawl's mark, in one chunk (:mod:`.feed`).

The commit of both is one (:func:`~crawler_ops.crawl.commit.commit`), given the strategy's way to advance.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.chunk import crawl_offsets
from crawler_ops.crawl.commit import Advance, advance_offsets, commit
from crawler_ops.crawl.feed import advance_feed, crawl_feed, plan_feed
from crawler_ops.crawl.plan import plan_offsets
from crawler_ops.crawl.run import RunContext
from crawler_ops.planning import ChunkPlan
from crawler_ops.results import ChunkResume, RunSummary


class CrawlStrategy(ABC):
    """How a run of one kind of source is planned, crawled and committed.

    :cvar has_total: the source says how many records it holds (a feed does not).
    """

    has_total: ClassVar[bool]

    @abstractmethod
    def plan(self, run: RunContext) -> list[ChunkPlan]:
        """Step 1: what the run reads, in chunks."""

    @abstractmethod
    def crawl(self, run: RunContext, payload: ChunkPlan, resume: ChunkResume | None = None) -> dict[str, Any]:
        """Step 2: read, publish and record one chunk; its result for XCom. ``resume``: the chunk may defer while its
        source is paused, and starts where its last leg stopped (a strategy that cannot stop midway waits instead)."""

    #: Step 3's move of the watermark over what the run did.
    advance: Advance


class OffsetBatches(CrawlStrategy):
    has_total = True

    def plan(self, run: RunContext) -> list[ChunkPlan]:
        return plan_offsets(run)

    def crawl(self, run: RunContext, payload: ChunkPlan, resume: ChunkResume | None = None) -> dict[str, Any]:
        return crawl_offsets(run, payload, resume)

    advance = staticmethod(advance_offsets)


class Feed(CrawlStrategy):
    has_total = False

    def plan(self, run: RunContext) -> list[ChunkPlan]:
        return plan_feed(run)

    def crawl(self, run: RunContext, payload: ChunkPlan, resume: ChunkResume | None = None) -> dict[str, Any]:
        # A feed's pages are reached one after another by their cursors: its chunk waits for the source in its worker.
        return crawl_feed(run, payload)

    advance = staticmethod(advance_feed)


#: The strategy of each paginator's ``crawl``.
STRATEGIES: Mapping[str, CrawlStrategy] = {"offsets": OffsetBatches(), "feed": Feed()}


def strategy_for(cfg: CrawlTaskConfig) -> CrawlStrategy:
    """How the task's runs read its source."""
    return STRATEGIES[cfg.source.paginator.crawl]


def plan_run(run: RunContext) -> list[ChunkPlan]:
    """Step 1, the DAG's ``plan`` task."""
    return strategy_for(run.cfg).plan(run)


def crawl_chunk(run: RunContext, payload: ChunkPlan, resume: ChunkResume | None = None) -> dict[str, Any]:
    """Step 2, one instance of the DAG's mapped ``crawl_chunk`` task; ``resume``: it may defer
    (:class:`~crawler_ops.crawl.chunk.ChunkDeferred`) and starts there."""
    return strategy_for(run.cfg).crawl(run, payload, resume)


def commit_run(run: RunContext, chunks: Sequence[ChunkPlan], results: Sequence[Any]) -> RunSummary:
    """Step 3, the DAG's ``commit`` task."""
    return commit(run, chunks, results, strategy_for(run.cfg).advance)
