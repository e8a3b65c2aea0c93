"""A chunk's memory under hostile pages (issue 27): the response bodies its fetch threads hold at once stay within
``source.chunk_memory_mb``, whatever the source sends, and a budget smaller than the pages in flight never stalls
the chunk (the oldest page, the one the chunk's thread waits for, may always read)."""

from __future__ import annotations

import gzip
import tracemalloc
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.batch_filter import BatchFilter
from crawler_ops.crawl.chunk import ChunkCrawler
from crawler_ops.crawl.ledger import DryRunLedger
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.errors import SourceError
from crawler_ops.hooks.kafka.producer import DryRunPublisher
from crawler_ops.hooks.source.hook import SourceApiHook, http_client
from crawler_ops.planning import Batch
from tests.hostile_source import HostileSource

MiB = 2**20
RECORD = b'{"id":"r","aae397":"2026-10-31 10:00:00"}'
PAGE = b'{"code":0,"data":{"total":1600,"data":[' + b",".join([RECORD] * 100) + b"]}}"


@pytest.fixture
def hostile() -> Any:
    source = HostileSource()
    yield source
    source.close()


def crawler(hostile: HostileSource, batches: int = 16, **source: Any) -> ChunkCrawler:
    limits = {"concurrency": 8, "max_retries": 0, "requests_per_s": None, "max_in_flight": None, **source}
    cfg = CrawlTaskConfig.model_validate({"id": "memory", "kafka": {"topic": "t.memory"}, "source": limits})
    run = RunContext(cfg=cfg, run_id="manual__memory", ref=datetime(2026, 11, 1, tzinfo=UTC), params=RunParams())
    hook = SourceApiHook(cfg.source, cfg.id, cfg.source_task)
    conn = SimpleNamespace(**hostile.connection(), login=None, password=None, extra_dejson={})
    hook.__dict__["client"] = http_client(conn, cfg.source)
    plan = [Batch(lo, lo + 100) for lo in range(100 * (batches - 1), -1, -100)]
    return ChunkCrawler(cfg, plan, "memory", hook, BatchFilter(run, False), DryRunLedger(), DryRunPublisher())


def peak_of_crawl(chunk: ChunkCrawler) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        result: Any = chunk.crawl()
    except Exception as exc:  # noqa: BLE001 - returned to the test
        result = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, result


def test_pages_padded_to_just_under_the_cap_stay_within_the_chunks_memory_budget(hostile):
    padded = gzip.compress(PAGE + b" " * (3 * MiB // 2), compresslevel=9)
    hostile.replies["list"] = (200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, padded)

    peak, result = peak_of_crawl(crawler(hostile, max_response_mb=2, chunk_memory_mb=8))

    assert not isinstance(result, Exception), result
    assert result.counts.fetched == 1600, "every page read, one at a time where the budget asked for it"
    assert peak < 10 * MiB, f"{peak / MiB:.1f} MiB for a budget of 8 MiB (before: 21.7 MiB)"


def test_a_gzip_bomb_on_every_page_stays_within_the_budget_and_fails_at_the_cap(hostile):
    bomb = gzip.compress(b" " * (64 * MiB), compresslevel=9)
    hostile.replies["list"] = (200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb)

    peak, result = peak_of_crawl(crawler(hostile, max_response_mb=2, chunk_memory_mb=8))

    assert isinstance(result, SourceError) and "response exceeds source.max_response_mb" in str(result)
    assert peak < 10 * MiB, f"{peak / MiB:.1f} MiB for a budget of 8 MiB (before: 684 MiB)"


def test_every_page_body_counted_against_the_budget_is_given_back_once_the_chunk_is_over(hostile):
    hostile.replies["list"] = (200, {"Content-Type": "application/json"}, PAGE)
    chunk = crawler(hostile, batches=6, max_response_mb=2, chunk_memory_mb=8)

    result = chunk.crawl()

    assert result.counts.fetched == 600
    assert chunk.memory.peak >= len(PAGE), "the pages were counted"
    assert chunk.memory.used == 0, "a page the chunk is done with still holds its bytes"
