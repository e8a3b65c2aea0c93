"""The chunk loop without services: a source on ``httpx.MockTransport``, a recording publisher, an in-memory ledger.

The integration tests prove the loop against the real Kafka, PostgreSQL and demo source; these pin down its
order of events (a batch is finished only after Kafka confirmed it, at most one batch produced and not
finished), its counts and its early stop, in milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.batch_filter import BatchFilter
from crawler_ops.crawl.chunk import ChunkCrawler
from crawler_ops.crawl.ledger import DryRunLedger
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.errors import DeliveryError, SourceError, StatusTableError
from crawler_ops.hooks.producer import DryRunPublisher
from crawler_ops.hooks.source import SourceApiHook
from crawler_ops.planning import Batch
from crawler_ops.records import Message
from crawler_ops.results import BatchOutcome, RunCounts

REF = datetime(2026, 11, 1, tzinfo=UTC)
LOCAL = ZoneInfo("Asia/Shanghai")
TOTAL, BATCH = 1_000, 100


def record_date(offset: int) -> datetime:
    """Record ``offset`` is ``TOTAL - 1 - offset`` hours older than the reference time (newest last)."""
    return REF - timedelta(hours=TOTAL - 1 - offset)


def in_window(offset: int) -> bool:
    return REF - timedelta(days=7) <= record_date(offset) <= REF + timedelta(hours=24)


RECORDS = [
    {"id": f"r{i}", "aae397": record_date(i).astimezone(LOCAL).strftime("%Y-%m-%d %H:%M:%S")} for i in range(TOTAL)
]


@dataclass
class Events:
    log: list[tuple[str, int]] = field(default_factory=list)

    def add(self, what: str, lo: int) -> None:
        self.log.append((what, lo))


@dataclass
class Source:
    """The demo source's list endpoint over ``RECORDS``; ``short`` pages come back one record short."""

    short: set[int] = field(default_factory=set)
    requested: list[int] = field(default_factory=list)
    events: Events | None = None

    def handle(self, request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        self.requested.append(offset)
        if self.events is not None:
            self.events.add("get", offset)
        page = RECORDS[offset : offset + limit]
        if offset in self.short:
            page = page[:-1]
        return httpx.Response(200, json={"data": {"data": page, "total": TOTAL}})


@dataclass
class RecordingPublisher:
    """Records what is sent and confirmed; ``fail_on`` makes the confirm of that batch raise."""

    events: Events
    fail_on: int | None = None
    sent: list[Sequence[Message]] = field(default_factory=list)

    delivered_before: dict[int, RunCounts] = field(default_factory=dict)
    batches: list[Batch] = field(default_factory=list)

    def delivered(self, batch: Batch) -> RunCounts | None:
        return self.delivered_before.get(batch.lo)

    def send(self, batch: Batch, messages: Sequence[Message], counts: RunCounts) -> None:
        self.batches.append(batch)
        self.sent.append(messages)
        if messages:
            assert first_offset(messages) >= batch.lo and counts.kept == len(messages)
            self.events.add("send", batch.lo)

    def confirm(self) -> int:
        batch, messages = self.batches[-1], self.sent[-1]
        if not messages:
            return 0
        if batch.lo == self.fail_on:
            raise DeliveryError(f"broker said no (offsets [{batch.lo}, {batch.hi}))")
        self.events.add("confirm", batch.lo)
        return sum(1 for m in messages if m.topic is None)

    def close(self) -> None:
        return None


def first_offset(messages: Sequence[Message]) -> int:
    return min(int(dict(m.headers)["source_offset"]) for m in messages)


@dataclass
class MemoryLedger:
    """An in-memory ledger: ``taken`` batches are held by another worker; ``lost`` batches' claims are lost."""

    events: Events
    taken: set[int] = field(default_factory=set)
    lost: set[int] = field(default_factory=set)
    finished: list[BatchOutcome] = field(default_factory=list)
    failed: list[tuple[list[Batch], str]] = field(default_factory=list)

    claimed: set[int] = field(default_factory=set)
    claim_s: float = 0.0

    def claim(self, batch: Batch) -> bool:
        time.sleep(self.claim_s)
        self.events.add("claim", batch.lo)
        if batch.lo in self.taken:
            return False
        self.claimed.add(batch.lo)
        return True

    def renew(self, batch: Batch) -> bool:
        """A claim is renewed only once it was made, and only while it was not lost."""
        return batch.lo in self.claimed and batch.lo not in self.lost

    def finish(self, outcome: BatchOutcome, next_batch: Batch | None = None) -> tuple[int, bool]:
        self.events.add("finish", outcome.batch.lo)
        self.finished.append(outcome)
        return 0, next_batch is None or self.renew(next_batch)

    def fail(self, in_flight: Sequence[Batch], error: str) -> None:
        self.failed.append((list(in_flight), error))

    def close(self) -> None:
        return None


def make_cfg(**overrides: Any) -> CrawlTaskConfig:
    base: dict[str, Any] = {
        "id": "unit",
        "kafka": {"topic": "t.unit", "key_field": "id"},
        "batch_size": BATCH,
        "max_expired_batches": 2,
        "source": {"concurrency": 2, "max_retries": 0},
    }
    return CrawlTaskConfig.model_validate({**base, **overrides})


def make_crawler(
    source: Source, ledger: Any, publisher: Any, *, early_stop: bool = False, cfg: CrawlTaskConfig | None = None
) -> ChunkCrawler:
    cfg = cfg or make_cfg()
    hook = SourceApiHook(cfg.source, cfg.id, cfg.source_task)
    hook.__dict__["client"] = httpx.Client(base_url="http://source.test", transport=httpx.MockTransport(source.handle))
    run = RunContext(cfg=cfg, run_id="manual__unit", ref=REF, params=RunParams())
    batches = [Batch(lo, lo + BATCH) for lo in range(TOTAL - BATCH, -1, -BATCH)]
    return ChunkCrawler(cfg, batches, "offsets 0-1000", hook, BatchFilter(run, early_stop), ledger, publisher)


@pytest.fixture
def events() -> Events:
    return Events()


def test_each_batch_is_finished_only_after_kafka_confirmed_it_and_one_at_most_is_unconfirmed(events):
    ledger = MemoryLedger(events)
    make_crawler(Source(), ledger, RecordingPublisher(events)).crawl()

    published = [lo for what, lo in events.log if what == "send"]
    assert published, "some batches have records in the window"
    for lo in published:
        order = [i for i, event in enumerate(events.log) if event in {("send", lo), ("confirm", lo)}]
        assert len(order) == 2 and events.log.index(("finish", lo)) > max(order)
    unfinished: set[int] = set()
    for what, lo in events.log:
        if what == "send":
            unfinished.add(lo)
            assert len(unfinished) == 1, f"two batches produced and not finished: {sorted(unfinished)}"
        elif what == "finish":
            unfinished.discard(lo)
    assert not unfinished


def test_each_batch_is_claimed_before_its_page_is_requested_and_claims_run_ahead_of_the_filter(events):
    fourth = TOTAL - 4 * BATCH
    fourth_claimed = threading.Event()

    class WaitingLedger(MemoryLedger):
        """Finishing the first batch waits (a while) for the fourth batch's claim: a loop that claimed a batch
        only once the one before it was finished would never make it."""

        def claim(self, batch: Batch) -> bool:
            claimed = super().claim(batch)
            if batch.lo == fourth:
                fourth_claimed.set()
            return claimed

        def finish(self, outcome: BatchOutcome, next_batch: Batch | None = None) -> tuple[int, bool]:
            if outcome.batch.lo == TOTAL - BATCH:
                fourth_claimed.wait(10.0)
            return super().finish(outcome, next_batch)

    ledger, publisher = WaitingLedger(events), RecordingPublisher(events)
    make_crawler(Source(events=events), ledger, publisher, cfg=make_cfg(source={"concurrency": 4})).crawl()

    log = events.log
    for lo in range(0, TOTAL, BATCH):
        assert log.index(("claim", lo)) < log.index(("get", lo)) < log.index(("finish", lo))
    # The fetch threads claim and read ahead while earlier batches are produced: the fourth batch is claimed
    # before the first one is finished.
    assert log.index(("claim", fourth)) < log.index(("finish", TOTAL - BATCH))


def test_kafka_confirming_and_recording_a_batch_overlap_with_filtering_the_next_one(events):
    finishing_900 = threading.Event()

    class SignallingLedger(MemoryLedger):
        def finish(self, outcome: BatchOutcome, next_batch: Batch | None = None) -> tuple[int, bool]:
            if outcome.batch.lo == 900:
                finishing_900.set()
            return super().finish(outcome, next_batch)

    crawler = make_crawler(Source(), SignallingLedger(events), RecordingPublisher(events))
    filter_page = crawler.filter.filter
    overlapped: list[bool] = []

    def gated(batch: Batch, records: Sequence[Any]) -> Any:
        if batch.lo == 800:  # filtering 800 waits until 900 is being finished: they must run at the same time
            overlapped.append(finishing_900.wait(timeout=5))
        return filter_page(batch, records)

    crawler.filter.filter = gated  # type: ignore[method-assign]
    crawler.crawl()

    assert overlapped == [True], "batch 900 was finished only after batch 800 was filtered"
    assert [o.batch.lo for o in crawler.ledger.finished][:2] == [900, 800]


def test_a_claim_is_renewed_only_after_its_fetch_thread_made_it(events):
    # One fetch thread whose claims are slow: the next batch is still being claimed when the batch before it is
    # finished, and its renewal must wait for that claim instead of finding the batch unclaimed.
    ledger = MemoryLedger(events, claim_s=0.02)
    result = make_crawler(Source(), ledger, RecordingPublisher(events), cfg=make_cfg(source={"concurrency": 1})).crawl()

    assert result.counts.batches_done == 10 and not ledger.failed


def test_the_result_counts_every_record_once_as_kept_or_expired(events):
    ledger, publisher = MemoryLedger(events), RecordingPublisher(events)
    result = make_crawler(Source(), ledger, publisher).crawl()

    kept = sum(in_window(i) for i in range(TOTAL))
    counts = result.counts
    assert (counts.fetched, counts.kept, counts.published, counts.expired) == (TOTAL, kept, kept, TOTAL - kept)
    assert (counts.pages, counts.batches_done, counts.batches_skipped, counts.dead_lettered) == (10, 10, 0, 0)
    sent_keys = sorted(m.key.decode() for messages in publisher.sent for m in messages)
    assert sent_keys == sorted(f"r{i}" for i in range(TOTAL) if in_window(i))
    assert [o.batch.lo for o in ledger.finished] == list(range(TOTAL - BATCH, -1, -BATCH))
    assert sum(o.counts.published for o in ledger.finished) == kept


def test_an_early_stop_finishes_older_batches_as_expired_without_fetching_them(events):
    source, ledger = Source(), MemoryLedger(events)
    result = make_crawler(source, ledger, RecordingPublisher(events), early_stop=True).crawl()

    # In the window: offsets 831..999, so batches 900 and 800 keep records; 700 and 600 are the two empty
    # pages that make the cutoff at 600; below it nothing is read but what was already prefetched.
    skipped = [o.batch.lo for o in ledger.finished if o.skipped_as_expired]
    assert skipped and max(skipped) < 600
    assert all(o.counts.fetched == 0 for o in ledger.finished if o.skipped_as_expired)
    assert len(ledger.finished) == 10, "every batch of the chunk is finished, expired or not"
    assert max(ledger.finished, key=lambda o: o.cutoff).cutoff == 600
    assert result.counts.kept == sum(in_window(i) for i in range(TOTAL))
    assert len(source.requested) <= 4 + make_cfg().source.concurrency
    assert min(source.requested) >= 600 - BATCH * make_cfg().source.concurrency


def test_a_batch_held_by_another_worker_is_skipped_and_not_fetched(events):
    source = Source()
    result = make_crawler(source, MemoryLedger(events, taken={500}), RecordingPublisher(events)).crawl()

    assert result.counts.batches_skipped == 1 and result.counts.batches_done == 9
    assert 500 not in source.requested


def test_a_lost_claim_stops_the_chunk_before_publishing_that_batch(events):
    ledger, publisher = MemoryLedger(events, lost={800}), RecordingPublisher(events)

    with pytest.raises(StatusTableError, match=r"batch \[800, 900\) is no longer claimed by this worker"):
        make_crawler(Source(), ledger, publisher).crawl()

    assert [lo for what, lo in events.log if what == "send"] == [900]
    assert [o.batch.lo for o in ledger.finished] == [900]
    assert [[b.lo for b in batches] for batches, _ in ledger.failed] == [[800]]


def test_a_short_page_fails_after_the_batch_before_it_is_finished(events):
    ledger = MemoryLedger(events)

    with pytest.raises(SourceError, match=r"page \[700, 800\) returned 99 records, expected 100"):
        make_crawler(Source(short={700}), ledger, RecordingPublisher(events)).crawl()

    assert [o.batch.lo for o in ledger.finished] == [900, 800]
    assert [[b.lo for b in batches] for batches, _ in ledger.failed] == [[700]]


def test_a_failed_delivery_gives_back_the_batch_and_the_one_filtered_after_it(events):
    ledger = MemoryLedger(events)

    with pytest.raises(DeliveryError, match="broker said no"):
        make_crawler(Source(), ledger, RecordingPublisher(events, fail_on=800)).crawl()

    assert [o.batch.lo for o in ledger.finished] == [900]
    [(in_flight, error)] = ledger.failed
    assert [b.lo for b in in_flight] == [800, 700] and "broker said no" in error


def test_a_dry_run_filters_everything_and_publishes_nothing():
    result = make_crawler(Source(), DryRunLedger(), DryRunPublisher()).crawl()

    assert result.counts.kept == sum(in_window(i) for i in range(TOTAL))
    assert (result.counts.published, result.counts.batches_done) == (0, 10)


def test_a_batch_an_earlier_attempt_delivered_is_recorded_done_with_its_counts_and_not_fetched(events):
    source, ledger = Source(), MemoryLedger(events)
    before = RunCounts(pages=1, fetched=100, kept=69, published=69, expired=31, batches_done=1)
    publisher = RecordingPublisher(events, delivered_before={800: before})
    result = make_crawler(source, ledger, publisher).crawl()

    assert 800 not in source.requested
    assert all(b.lo != 800 for b, messages in zip(publisher.batches, publisher.sent, strict=True) if messages)
    [outcome] = [o for o in ledger.finished if o.batch.lo == 800]
    assert outcome.counts == before
    assert result.counts.kept == sum(in_window(i) for i in range(TOTAL) if not 800 <= i < 900) + 69
