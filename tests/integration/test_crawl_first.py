"""First crawls and incremental runs through the real stack, asserting on Kafka and PostgreSQL contents."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from crawler_ops.crawl import plan as plan_module
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from tests.support import duplicates, make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def test_first_crawl_publishes_exactly_the_in_window_records(source, kafka_bootstrap, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=5_030, ref=REF, in_window_share=0.3)
    cfg = make_task(unique_id, max_chunks=1)  # one chunk, so the request order is the crawl order

    assert run_dag(cfg, REF) == "success"

    truth = source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert sorted(m.key for m in messages) == sorted(truth["in_window_ids"])
    assert not duplicates(messages)
    assert watermark(pg_uri, unique_id) == 5_030
    run = run_record(pg_uri, unique_id)
    assert (run["published"], run["kept"], run["status"]) == (len(messages), len(messages), "success")
    # Newest pages first: requests walk down from the top, reordered at most within the prefetch window,
    # and no page is requested twice.
    pages = [r["offset"] for r in source.page_requests(unique_id)]
    depth = cfg.source.concurrency
    assert 4_930 in pages[:depth]
    assert all(pages[i] > pages[i + depth] for i in range(len(pages) - depth))
    assert len(set(pages)) == len(pages)
    # Far fewer pages than the whole source: the window and max_expired_batches bound the crawl.
    in_window_pages = -(-truth["in_window_count"] // cfg.batch_size)
    assert len(pages) <= in_window_pages + cfg.max_expired_batches + 2


def test_first_crawl_includes_the_oldest_partial_batch(source, kafka_bootstrap, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=1_050, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)

    assert run_dag(cfg, REF) == "success"

    offsets = sorted(int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, cfg.kafka.topic))
    assert offsets == list(range(1_050))
    requests = [(r["offset"], r["limit"]) for r in source.page_requests(unique_id)]
    assert (0, 50) in requests, "the oldest partial page [0, 50) is fetched"
    assert len(requests) == 11


def test_incremental_run_publishes_only_new_records_and_fetches_no_old_page(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=2_000, ref=REF, in_window_share=0.5, append_step_s=60)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    first = {m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}
    source.append(unique_id, 250)
    source.clear_requests(unique_id)

    later = datetime(2026, 11, 1, 6, tzinfo=UTC)
    assert run_dag(cfg, later) == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    new = [m for m in messages if m.key not in first]
    truth = source.truth(unique_id, later, days=7, tolerance_s=24 * 3600)
    assert sorted(m.key for m in new) == sorted(set(truth["in_window_ids"]) - first)
    assert len(new) == 250
    assert not duplicates(messages)
    assert all(r["offset"] >= 2_000 for r in source.page_requests(unique_id))
    assert watermark(pg_uri, unique_id) == 2_250


def test_an_early_stop_in_the_newest_chunk_makes_older_chunks_skip_their_batches_as_expired(
    source, kafka_bootstrap, pg_uri, unique_id, monkeypatch
):
    source.create(unique_id, total=3_000, ref=REF, in_window_share=0.1)  # offsets 2700..2999 are in the window
    # As if the dates were not in time order: the probe cannot place the window start, so the whole range is
    # planned and only the early stop (max_expired_batches empty pages in a row) bounds the crawl.
    monkeypatch.setattr(plan_module, "probe_window_start", lambda source, total, run: 0)
    cfg = make_task(unique_id, max_chunks=3, min_batches_per_chunk=1, max_expired_batches=4, source={"concurrency": 1})
    run = RunContext(cfg=cfg, run_id="early-stop", ref=REF, params=RunParams())
    chunks = plan_run(run)
    assert [c.batches[0].hi for c in chunks] == [3_000, 2_000, 1_000] and all(c.early_stop for c in chunks)

    fetched: list[set[int]] = []
    results = []
    for index, chunk in enumerate(chunks):  # newest first, one after the other, as a busy pool might run them
        source.clear_requests(unique_id)
        results.append(crawl_chunk(replace(run, map_index=index), chunk))
        fetched.append({r["offset"] for r in source.page_requests(unique_id)})

    newest, *older = fetched
    assert max(newest) == 2_900 and len(newest) <= 3 + cfg.max_expired_batches + cfg.source.concurrency
    for pages, chunk in zip(older, chunks[1:], strict=True):
        top = chunk.batches[0].lo
        assert pages == set(range(top, top - 100 * len(pages), -100)), "only the chunk's first pages"
        assert len(pages) < cfg.max_expired_batches, "stopped by the cutoff the newest chunk found, not its own"
    rows = query(pg_uri, "SELECT id, status, expired FROM crawler_ops.batch_status WHERE task_name = %s", unique_id)
    assert {status for _, status, _ in rows} == {2} and len(rows) == 30
    assert {lo for lo, _, expired in rows if expired} == {lo for lo, _, _ in rows} - set().union(*fetched)
    assert sum(r["batches_done"] for r in results) == 30

    summary = commit_run(run, chunks, results)
    assert summary.status == "success" and watermark(pg_uri, unique_id) == 3_000
    truth = source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)
    assert sorted(m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)) == sorted(truth["in_window_ids"])
