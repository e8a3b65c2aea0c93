"""The crawl strategy of a run is chosen once, from its paginator's kind: offsets in batches, or a feed walked page
after page; each step goes to the chosen strategy's own plan, crawl and advance."""

from __future__ import annotations

from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl import steps
from crawler_ops.crawl.commit import advance_offsets
from crawler_ops.crawl.feed import advance_feed
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.planning import Batch, ChunkPlan


def task(paginator: dict[str, Any]) -> CrawlTaskConfig:
    return CrawlTaskConfig.model_validate(
        {"id": "jobs", "kafka": {"topic": "jobs", "key_field": "id"}, "source": {"paginator": paginator}}
    )


@pytest.mark.parametrize(
    ("paginator", "strategy", "advance", "has_total"),
    [
        ({}, steps.OffsetBatches, advance_offsets, True),
        ({"type": "page"}, steps.OffsetBatches, advance_offsets, True),
        ({"type": "cursor"}, steps.Feed, advance_feed, False),
        ({"type": "header_cursor"}, steps.Feed, advance_feed, False),
        ({"type": "next_link"}, steps.Feed, advance_feed, False),
        ({"type": "link_header"}, steps.Feed, advance_feed, False),
    ],
    ids=["offset", "page", "cursor", "header_cursor", "next_link", "link_header"],
)
def test_the_paginator_kind_chooses_the_strategy(paginator, strategy, advance, has_total):
    chosen = steps.strategy_for(task(paginator))
    assert type(chosen) is strategy and chosen.advance is advance and chosen.has_total is has_total


def test_each_step_goes_to_the_chosen_strategy(monkeypatch: pytest.MonkeyPatch):
    called: list[tuple[str, Any]] = []
    chunk = ChunkPlan("feed from page 0", (Batch(0, 1),))
    monkeypatch.setattr(steps, "plan_feed", lambda run: called.append(("plan", run.cfg.id)) or [chunk])
    monkeypatch.setattr(steps, "crawl_feed", lambda run, payload: called.append(("crawl", payload)) or {})
    monkeypatch.setattr(steps, "commit", lambda run, chunks, results, advance: called.append(("commit", advance)))
    monkeypatch.setattr(steps, "STRATEGIES", {"offsets": steps.OffsetBatches(), "feed": steps.Feed()})
    run = RunContext(cfg=task({"type": "cursor"}), run_id="manual__unit", ref=None, params=RunParams())  # type: ignore[arg-type]

    assert steps.plan_run(run) == [chunk]
    steps.crawl_chunk(run, chunk)
    steps.commit_run(run, [chunk], [])

    assert called == [("plan", "jobs"), ("crawl", chunk), ("commit", advance_feed)]
