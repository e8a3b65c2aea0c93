"""The chunk loop without services: a source on ``httpx.MockTransport``, a recording publisher, an in-memory ledger.

The integration tests prove the loop against the real Kafka, PostgreSQL and demo source; these pin down its
order of events (a batch is finished only after Kafka confirmed it, at most one batch produced and not
finished), its counts and its early stop, in milliseconds.
"""

from __future__ import annotations

import re
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
from crawler_ops.hooks.kafka.producer import DryRunPublisher
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.message.records import Message
from crawler_ops.planning import Batch
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
    paused: dict[int, int] = field(default_factory=dict)  # offset -> its next requests answered 429 with this wait

    def handle(self, request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        self.requested.append(offset)
        if self.events is not None:
            self.events.add("get", offset)
        if offset in self.paused:
            return httpx.Response(429, headers={"Retry-After": str(self.paused[offset])})
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
        assert counts.published == counts.kept, "a batch is sent counting every kept record as published"
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
    then: dict[int, list[int]] = field(default_factory=dict)  # batch -> the batches its claim may take with it

    def connect(self) -> None:
        self.events.add("connect", -1)

    def claim(self, batch: Batch, then: Sequence[Batch] = ()) -> bool:
        time.sleep(self.claim_s)
        self.events.add("claim", batch.lo)
        self.then[batch.lo] = [b.lo for b in then]
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

        def claim(self, batch: Batch, then: Sequence[Batch] = ()) -> bool:
            claimed = super().claim(batch, then)
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


def test_each_claim_may_take_the_batches_planned_after_its_own_as_deep_as_the_fetches_go(events):
    ledger = MemoryLedger(events)
    make_crawler(
        Source(events=events), ledger, RecordingPublisher(events), cfg=make_cfg(source={"concurrency": 4})
    ).crawl()
    newest_first = list(range(TOTAL - BATCH, -1, -BATCH))
    assert ledger.then == {lo: newest_first[i + 1 : i + 4] for i, lo in enumerate(newest_first)}


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


def test_the_ledger_connects_while_the_chunks_first_page_is_on_its_way(events):
    connected = threading.Event()
    answered_connected: list[bool] = []

    class ConnectingLedger(MemoryLedger):
        def connect(self) -> None:
            super().connect()
            connected.set()

    class WaitingSource(Source):
        def handle(self, request: httpx.Request) -> httpx.Response:
            answered_connected.append(connected.wait(timeout=5))
            return super().handle(request)

    make_crawler(WaitingSource(), ConnectingLedger(events), RecordingPublisher(events)).crawl()

    assert answered_connected[0], "the first page was answered before the ledger connected"


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

    with pytest.raises(StatusTableError) as caught:
        make_crawler(Source(), ledger, publisher).crawl()

    assert str(caught.value) == (
        "task unit: batch [800, 900) is no longer claimed by this worker (the run was cancelled, or its lease "
        "expired and another worker took it); stopping before publishing it"
    )
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
    assert [b.lo for b in in_flight] == [800, 700] and error == "DeliveryError: broker said no (offsets [800, 900))"


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


# --- crawl_offsets and publisher_for: what a chunk is built from ---------------------------------------------------


@dataclass
class FakeHook:
    """The Kafka hook: records which producer the chunk asked for."""

    conn_id: str
    settings: dict[str, Any]
    asked: list[tuple[str, ...]] = field(default_factory=list)

    def get_producer(self) -> str:
        self.asked.append(("idempotent",))
        return "idempotent producer"

    def transactional_producer(self, tid: str) -> str:
        self.asked.append(("transactional", tid))
        return f"transactional producer {tid}"

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": f"broker of {self.conn_id}"}


@dataclass
class Built:
    """What a publisher or marker log was built with."""

    kind: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def kafka_parts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The publishers module's Kafka classes replaced by recorders: ``made[0]`` is the hook, then what was built."""
    from crawler_ops.crawl import publishers as chunk_module

    made: list[Any] = []

    def hook(conn_id: str, settings: dict[str, Any]) -> FakeHook:
        made.append(FakeHook(conn_id, settings))
        return made[-1]

    def recorder(kind: str) -> Any:
        def build(*args: Any, **kwargs: Any) -> Built:
            made.append(Built(kind, args, kwargs))
            return made[-1]

        return build

    monkeypatch.setattr(chunk_module, "IdempotentProducerHook", hook)
    monkeypatch.setattr(chunk_module, "KafkaPublisher", recorder("at least once"))
    monkeypatch.setattr(chunk_module, "TransactionalPublisher", recorder("exactly once"))
    monkeypatch.setattr(chunk_module, "MarkerLog", recorder("markers"))
    return made


@dataclass
class GenerationsLedger(MemoryLedger):
    def generations(self, batches: Sequence[Batch]) -> dict[int, str]:
        return {b.lo: f"run of {b.lo}" for b in batches}


def run_of(cfg: CrawlTaskConfig, **params: Any) -> RunContext:
    return RunContext(cfg=cfg, run_id="manual__unit", ref=REF, params=RunParams(**params), map_index=3, try_number=2)


CHUNK = [Batch(300, 400), Batch(200, 300)]


def test_a_dry_run_publishes_through_nothing(kafka_parts):
    from crawler_ops.crawl.publishers import publisher_for

    assert isinstance(publisher_for(run_of(make_cfg(), dry_run=True), CHUNK, DryRunLedger()), DryRunPublisher)
    assert kafka_parts == []


def test_at_least_once_delivery_publishes_through_the_idempotent_producer_of_the_tasks_connection(kafka_parts):
    from crawler_ops.crawl.publishers import publisher_for

    cfg = make_cfg(kafka={"topic": "t.unit", "key_field": "id", "conn_id": "kafka_unit"})
    publisher = publisher_for(run_of(cfg), CHUNK, MemoryLedger(Events()))

    hook, built = kafka_parts
    assert (hook.conn_id, hook.asked) == ("kafka_unit", [("idempotent",)])
    assert publisher is built
    assert built == Built("at least once", ("idempotent producer", "t.unit", "unit"), {"prepare": None})


def test_exactly_once_delivery_fences_per_chunk_and_marks_batches_with_the_generations_of_their_rows(kafka_parts):
    from crawler_ops.crawl.publishers import publisher_for

    cfg = make_cfg(kafka={"topic": "t.unit", "key_field": "id", "delivery": "exactly_once"})
    ledger = GenerationsLedger(Events())
    publisher = publisher_for(run_of(cfg), CHUNK, ledger)

    hook, markers, built = kafka_parts
    tid = "crawler_ops.unit.200-400"
    assert hook.asked == [("transactional", tid)]
    assert markers == Built(
        "markers",
        (
            {"bootstrap.servers": f"broker of {cfg.kafka.conn_id}"},
            cfg.marker_topic,
            "unit",
            "manual__unit",
            {300: "run of 300", 200: "run of 200"},
        ),
        {"per_run": False},
    )
    assert publisher is built and built.args == (f"transactional producer {tid}", "t.unit", "unit", markers)
    assert built.kwargs == {"holds": ledger.renew, "prepare": None}, "before each commit the publisher asks the ledger"


def test_exactly_once_replays_fence_per_run_and_chunk_and_keep_markers_of_their_own_run(kafka_parts):
    from crawler_ops.crawl.publishers import publisher_for

    cfg = make_cfg(kafka={"topic": "t.unit", "key_field": "id", "delivery": "exactly_once"})
    publisher_for(run_of(cfg, replay_from=0, replay_to=400), CHUNK, GenerationsLedger(Events()))

    hook, markers, built = kafka_parts
    tid = "crawler_ops.unit.manual__unit.200-400"
    assert hook.asked == [("transactional", tid)]
    assert markers.args[1:4] == (cfg.marker_topic, "unit", "manual__unit")
    assert markers.kwargs == {"per_run": True}
    assert built.args == (f"transactional producer {tid}", "t.unit", "unit", markers)


@pytest.fixture
def chunk_parts(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """crawl_chunk's ledger (recording the owner and token it was made for) and source (the mock transport)."""
    from crawler_ops.crawl import chunk as chunk_module

    parts: dict[str, Any] = {"ledger": MemoryLedger(Events())}

    def ledger_for(run: RunContext, owner: str, token: str) -> MemoryLedger:
        parts["run"], parts["owner"], parts["token"] = run, owner, token
        return parts["ledger"]

    parts["source"] = Source()

    def source(run: RunContext, filtered: bool | None = None, defers: bool = False) -> SourceApiHook:
        defer_after_s = run.cfg.source.defer_after_s if defers else None
        hook = SourceApiHook(run.cfg.source, run.cfg.id, run.cfg.source_task, defer_after_s=defer_after_s)
        transport = httpx.MockTransport(parts["source"].handle)
        hook.__dict__["client"] = httpx.Client(base_url="http://source.test", transport=transport)
        return hook

    monkeypatch.setattr(chunk_module, "ledger_for", ledger_for)
    monkeypatch.setattr(RunContext, "source", source)
    return parts


@pytest.mark.parametrize("early_stop", [False, True])
def test_a_chunk_crawls_its_planned_batches_as_its_claims_owner_and_returns_its_result(chunk_parts, early_stop):
    from crawler_ops.crawl.steps import crawl_chunk
    from crawler_ops.planning import ChunkPlan

    batches = tuple(Batch(lo, lo + BATCH) for lo in range(TOTAL - BATCH, -1, -BATCH))
    run = run_of(make_cfg(), dry_run=True)
    result = crawl_chunk(run, ChunkPlan("offsets 0-1000", batches, early_stop))

    assert chunk_parts["run"] is run and chunk_parts["owner"] == "manual__unit|3"
    assert re.fullmatch(r"manual__unit\|3\|2\|[0-9a-f]{12}", chunk_parts["token"])
    assert result["label"] == "offsets 0-1000"
    ledger = chunk_parts["ledger"]
    assert ledger.claimed == {b.lo for b in batches} and not ledger.failed
    # The first crawl stops after the two empty pages below the window (700 and 600; a page fetched ahead may add
    # a lower cutoff); the other reads every page.
    cutoff = max(o.cutoff for o in ledger.finished)
    assert cutoff == (600 if early_stop else 0)
    assert result["kept"] == sum(in_window(i) for i in range(TOTAL))


def test_a_deferrable_chunk_stops_at_the_batch_that_must_wait_and_its_next_leg_crawls_the_rest_once(chunk_parts):
    from crawler_ops.crawl.chunk import ChunkDeferred
    from crawler_ops.crawl.steps import crawl_chunk
    from crawler_ops.planning import ChunkPlan
    from crawler_ops.results import ChunkResume

    batches = tuple(Batch(lo, lo + BATCH) for lo in range(TOTAL - BATCH, -1, -BATCH))
    plan = ChunkPlan("offsets 0-1000", batches, False)
    run = run_of(make_cfg(source={"concurrency": 2, "max_retries": 1, "defer_after_s": 60}), dry_run=True)
    ledger, source = chunk_parts["ledger"], chunk_parts["source"]
    source.paused[500] = 120

    with pytest.raises(ChunkDeferred) as stopped:
        crawl_chunk(run, plan, ChunkResume())

    resume = stopped.value.resume
    assert stopped.value.wait_s == 120.0
    assert (resume.index, resume.deferrals, resume.stalls) == (batches.index(Batch(500, 600)), 1, 0)
    assert [o.batch.lo for o in ledger.finished] == [900, 800, 700, 600], "every batch before it is done"
    assert resume.counts.batches_done == 4 and not ledger.failed, "no batch failed: no attempt is counted"

    del source.paused[500]
    result = crawl_chunk(run, plan, resume)

    assert [o.batch.lo for o in ledger.finished] == [900, 800, 700, 600, 500, 400, 300, 200, 100, 0]
    assert (result["batches_done"], result["deferrals"]) == (10, 1)
    assert result["kept"] == sum(in_window(i) for i in range(TOTAL))


def test_a_chunk_deferred_more_than_max_retries_times_without_a_batch_done_fails_and_gives_its_batch_back(
    chunk_parts,
):
    from crawler_ops.crawl.chunk import ChunkDeferred
    from crawler_ops.crawl.steps import crawl_chunk
    from crawler_ops.errors import SourceError
    from crawler_ops.planning import ChunkPlan
    from crawler_ops.results import ChunkResume

    batches = (Batch(100, 200), Batch(0, 100))
    plan = ChunkPlan("offsets 0-200", batches, False)
    run = run_of(make_cfg(source={"concurrency": 1, "max_retries": 2, "defer_after_s": 60}), dry_run=True)
    chunk_parts["source"].paused[100] = 600
    resume = ChunkResume()
    for stalls in (1, 2):
        with pytest.raises(ChunkDeferred) as stopped:
            crawl_chunk(run, plan, resume)
        resume = stopped.value.resume
        assert (resume.index, resume.stalls, resume.deferrals) == (0, stalls, stalls)

    with pytest.raises(SourceError, match="deferred 3 times in a row without finishing a batch") as failed:
        crawl_chunk(run, plan, resume)

    assert failed.value.retriable
    assert [(batches_, "deferred" in error) for batches_, error in chunk_parts["ledger"].failed] == [
        ([Batch(100, 200)], True)
    ]


def test_a_chunk_that_may_not_defer_waits_in_its_worker(chunk_parts, monkeypatch):
    from crawler_ops.crawl.steps import crawl_chunk
    from crawler_ops.hooks.source import hook as hook_module
    from crawler_ops.planning import ChunkPlan

    waits: list[float] = []
    source, real_sleep = chunk_parts["source"], time.sleep

    def sleep(seconds: float) -> None:  # the pause ends while the worker waits
        if seconds < 1:  # not the source's wait
            return real_sleep(seconds)
        waits.append(seconds)
        source.paused.clear()

    monkeypatch.setattr(hook_module.time, "sleep", sleep)
    source.paused[100] = 120
    run = run_of(make_cfg(source={"concurrency": 1, "max_retries": 1, "defer_after_s": 60}), dry_run=True)

    result = crawl_chunk(run, ChunkPlan("offsets 0-200", (Batch(100, 200), Batch(0, 100)), False))

    assert waits == [120.0] and (result["batches_done"], result["deferrals"]) == (2, 0)


def test_a_chunk_that_cannot_start_names_why_on_the_run_and_closes_its_ledger(chunk_parts, caplog):
    from crawler_ops.crawl.steps import crawl_chunk
    from crawler_ops.errors import ConfigError
    from crawler_ops.planning import ChunkPlan

    closed: list[bool] = []
    chunk_parts["ledger"].close = lambda: closed.append(True)
    cfg = make_cfg(transform="crawler_ops.no_such_module.transform")

    with (
        caplog.at_level("ERROR", logger="crawler_ops.crawl.chunk"),
        pytest.raises(ConfigError, match="cannot be imported"),
    ):
        crawl_chunk(run_of(cfg, dry_run=True), ChunkPlan("offsets 0-100", (Batch(0, 100),)))

    [(in_flight, error)] = chunk_parts["ledger"].failed
    assert in_flight == [] and error.startswith("ConfigError: task unit: transform ")
    assert [r.getMessage() for r in caplog.records] == [f"task unit chunk offsets 0-100 could not start: {error}"]
    assert closed == [True] and chunk_parts["ledger"].claimed == set()


# --- the claims, the cutoff and the counts the chunk's threads share ----------------------------------------------


def test_a_lost_claim_on_the_first_batch_stops_the_chunk_before_publishing_anything(events):
    ledger, publisher = MemoryLedger(events, lost={900}), RecordingPublisher(events)

    with pytest.raises(StatusTableError, match=r"batch \[900, 1000\) is no longer claimed"):
        make_crawler(Source(), ledger, publisher).crawl()

    assert publisher.sent == [] and ledger.finished == []


@dataclass
class FailingSource(Source):
    """The source answers 500 for the pages at ``failing`` offsets."""

    failing: set[int] = field(default_factory=set)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if int(request.url.params["offset"]) in self.failing:
            return httpx.Response(500, json={"error": "down"})
        return super().handle(request)


def test_a_failed_fetch_fails_the_chunk_after_the_batch_before_it_is_finished(events):
    ledger = MemoryLedger(events)

    with pytest.raises(SourceError):
        make_crawler(FailingSource(failing={800}), ledger, RecordingPublisher(events)).crawl()

    assert [o.batch.lo for o in ledger.finished] == [900]
    assert [[b.lo for b in batches] for batches, _ in ledger.failed] == [[800]]


def test_batches_delivered_by_an_earlier_attempt_count_in_a_first_crawls_empty_streak_by_their_kept_records(events):
    # 900 keeps records; 800 was delivered with records, 700 and 600 delivered empty: the streak of two empty pages
    # ends at 600, as it would had every page been read.
    delivered = {
        800: RunCounts(pages=1, fetched=100, kept=69, published=69, expired=31, batches_done=1),
        700: RunCounts(pages=1, fetched=100, expired=100, batches_done=1),
        600: RunCounts(pages=1, fetched=100, expired=100, batches_done=1),
    }
    ledger = MemoryLedger(events)
    make_crawler(Source(), ledger, RecordingPublisher(events, delivered_before=delivered), early_stop=True).crawl()

    assert max(o.cutoff for o in ledger.finished) == 600
    assert [o.cutoff for o in ledger.finished if o.batch.lo in (800, 700, 600)] == [0, 0, 600]


def test_a_batch_ending_at_the_cutoff_is_not_read_and_one_reaching_above_it_is(events):
    crawler = make_crawler(Source(), MemoryLedger(events), RecordingPublisher(events))
    crawler.shared.add_done(BatchOutcome(Batch(600, 700), RunCounts(batches_done=1), (), 600), 0)

    assert isinstance(crawler.fetch(Batch(500, 600), crawler.memory.account()), chunk_module().BelowCutoff)
    assert isinstance(crawler.fetch(Batch(550, 650), crawler.memory.account()), chunk_module().PageRead)


def chunk_module() -> Any:
    from crawler_ops.crawl import chunk

    return chunk


def test_shared_counts_start_at_nothing_and_keep_the_highest_cutoff_seen():
    shared = chunk_module().SharedCounts()
    assert shared.cutoff() == 0 and shared.counts() == RunCounts()

    shared.add_done(BatchOutcome(Batch(900, 1000), RunCounts(kept=3, batches_done=1), (), 0), 400)
    assert shared.cutoff() == 400, "the run's cutoff read in the batch's transaction"
    shared.add_done(BatchOutcome(Batch(800, 900), RunCounts(kept=2, batches_done=1), (), 300), 0)
    assert shared.cutoff() == 400, "a lower cutoff never lowers it"
    shared.add_skipped()
    shared.add_skipped()
    assert shared.counts() == RunCounts(kept=5, batches_done=2, batches_skipped=2)


@pytest.mark.parametrize("concurrency", [1, 3])
def test_fetches_run_ahead_of_the_chunks_thread_exactly_concurrency_deep(events, concurrency):
    crawler = make_crawler(
        Source(), MemoryLedger(events), RecordingPublisher(events), cfg=make_cfg(source={"concurrency": concurrency})
    )
    accounts = crawler.memory.account
    submitted: list[int] = []
    crawler.memory.account = lambda: (submitted.append(1), accounts())[1]  # type: ignore[method-assign]
    filter_page = crawler.filter.filter
    seen: list[tuple[int, int]] = []

    def counting(batch: Batch, records: Sequence[Any]) -> Any:
        seen.append((batch.lo, len(submitted)))
        return filter_page(batch, records)

    crawler.filter.filter = counting  # type: ignore[method-assign]
    crawler.crawl()

    # While the chunk's thread filters batch k (0-based, newest first), batches 0 .. k + concurrency - 1 are fetched.
    assert seen == [(TOTAL - BATCH * (k + 1), min(k + concurrency, 10)) for k in range(10)]


def test_the_progress_is_logged_every_ten_batches_and_once_the_chunk_is_done(chunk_parts, monkeypatch, caplog):
    from types import SimpleNamespace

    from crawler_ops.planning import ChunkPlan

    # A clock that stands still: no time elapses, and the rate divides by the floor of a microsecond.
    monkeypatch.setattr(chunk_module(), "time", SimpleNamespace(monotonic=lambda: 1000.0))
    batches = tuple(Batch(lo, lo + 40) for lo in range(TOTAL - 40, -1, -40))
    asked: list[tuple[Any, Any]] = []

    def publisher_for(
        run: RunContext, chunk: Sequence[Batch], ledger: Any, schema_id: Any = None
    ) -> RecordingPublisher:
        asked.append((list(chunk), ledger))
        return RecordingPublisher(Events())

    monkeypatch.setattr(chunk_module(), "publisher_for", publisher_for)
    with caplog.at_level("INFO", logger="crawler_ops.crawl.chunk"):
        result = crawl_chunk_of(make_cfg(batch_size=40), ChunkPlan("offsets 0-1000", batches))

    assert (result["label"], result["elapsed_s"]) == ("offsets 0-1000", 0.0)
    assert asked == [(list(batches), chunk_parts["ledger"])]
    progress = [r.getMessage() for r in caplog.records if "batches (" in r.getMessage()]
    expected = []
    for done, lo in ((0, 960), (10, 560), (20, 160), (25, 0)):
        fetched = 40 * done  # the batches recorded done so far: the newest ``done``
        kept = sum(in_window(i) for i in range(TOTAL - fetched, TOTAL))
        expected.append(
            f"task unit offsets 0-1000: {done}/25 batches ({100 * done / 25:.0f}%), at offset {lo}; fetched={fetched} "
            f"kept={kept} published={kept} expired={fetched - kept} dead=0 ({fetched / 1e-6:.0f} records/s)"
        )
    assert progress == expected


def crawl_chunk_of(cfg: CrawlTaskConfig, payload: Any, **params: Any) -> dict[str, Any]:
    return chunk_module().crawl_offsets(run_of(cfg, **params), payload)


def test_what_a_chunk_skips_records_without_reading_and_why_it_failed_are_logged(events, caplog):
    delivered = {800: RunCounts(pages=1, fetched=100, kept=69, published=69, expired=31, batches_done=1)}
    publisher = RecordingPublisher(events, delivered_before=delivered)
    with caplog.at_level("INFO", logger="crawler_ops.crawl.chunk"), pytest.raises(SourceError):
        make_crawler(Source(short={600}), MemoryLedger(events, taken={700}), publisher).crawl()

    messages = [r.getMessage() for r in caplog.records if "batches (" not in r.getMessage()]
    assert messages == [
        "task unit: batch [800, 900) was delivered by an earlier attempt; recorded done",
        "task unit: batch [700, 800) is done or held by another worker; skipped",
        "task unit chunk offsets 0-1000 failed: SourceError: task unit: page [600, 700) returned 99 records, expected "
        "100 (short page or shrinking source); not marked done",
    ]


@pytest.mark.parametrize(
    ("batches", "line"),
    [
        ((Batch(900, 1000),), "1/1 batches (100%), at offset 900; fetched=100 kept=100"),
        ((), "0/0 batches (0%), at offset 0; fetched=0 kept=0"),
    ],
    ids=["one-batch", "no-batch"],
)
def test_the_line_of_a_chunk_done_gives_its_share_and_lowest_offset(chunk_parts, caplog, batches, line):
    from crawler_ops.planning import ChunkPlan

    with caplog.at_level("INFO", logger="crawler_ops.crawl.chunk"):
        crawl_chunk_of(make_cfg(), ChunkPlan("the chunk", batches), dry_run=True)

    assert f"task unit the chunk: {line}" in caplog.records[-1].getMessage()


def test_a_batch_profiles_only_its_first_published_records_for_the_drift_report() -> None:
    from crawler_ops.crawl.batch_filter import FilteredBatch
    from crawler_ops.crawl.chunk import published_profile

    published = [Message(b"k%d" % i, b'{"id":%d,"n":"x"}' % i, []) for i in range(5)]
    dead = Message(b"d", b'{"task":"t","reason":"no date","record":{}}', [], "dead.letters")
    sent = FilteredBatch(Batch(0, 6), [*published, dead], fetched=6, kept=5)

    profile = published_profile(sent, 3)

    assert profile.sampled_records == 3
    assert profile.fields == {"id": {"integer": 3}, "n": {"string": 3}}
    assert published_profile(sent, 100).fields == {"id": {"integer": 5}, "n": {"string": 5}}, "no dead letter"
