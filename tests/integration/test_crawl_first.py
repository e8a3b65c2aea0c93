"""First crawls and incremental runs through the real stack, asserting on Kafka and PostgreSQL contents."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.support import duplicates, make_task, read_topic, run_record, watermark

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
