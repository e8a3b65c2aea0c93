"""Step 2 of a crawl run, the DAG's mapped ``crawl_chunk`` task: fetch, filter, publish, checkpoint.

Where things happen, in one place:
- fetched: :meth:`SourceApiHook.get_page`, claimed and fetched ``source.concurrency`` batches ahead on the fetch
  threads (:meth:`ChunkCrawler.fetch`);
- filtered: :meth:`BatchFilter.filter`, around :func:`crawler_ops.records.build_messages`;
- published: the :class:`~crawler_ops.hooks.producer.Publisher`'s ``send`` and ``confirm`` (every delivery report);
- checkpointed: the :class:`~crawler_ops.crawl.ledger.Ledger`'s ``finish`` (batch done, on the checkpoint thread), then
  :func:`crawler_ops.crawl.commit.commit_run` (watermark).
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from airflow.sdk.module_loading import import_string

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.ledger import Ledger, ledger_for
from crawler_ops.crawl.run import RunContext
from crawler_ops.errors import ConfigError, SourceError, StatusTableError
from crawler_ops.filtering import Window
from crawler_ops.hooks.exactly_once import MarkerLog, TransactionalPublisher, transactional_id
from crawler_ops.hooks.producer import DryRunPublisher, IdempotentProducerHook, KafkaPublisher, Publisher
from crawler_ops.hooks.source import SourceApiHook
from crawler_ops.hooks.store import cap_record
from crawler_ops.planning import Batch, ChunkPlan
from crawler_ops.records import Message, Transform, build_messages, dead_letter_messages, dead_letter_record
from crawler_ops.results import BatchOutcome, ChunkResult, DeadLetter, RunCounts
from crawler_ops.transforms import bind_task_id

log = logging.getLogger(__name__)
# What a batch's fetch brings: its page, the counts of an earlier attempt that delivered it, or nothing (below
# the expiry cutoff).
Fetched = Sequence[Any] | RunCounts | None


class NotClaimed:
    """The fetch of a batch that is done or held by another worker: nothing was read."""


NOT_CLAIMED = NotClaimed()


@dataclass(frozen=True)
class Ahead:
    """A batch handed to a fetch thread, which claims it and then reads its page."""

    batch: Batch
    page: Future[Fetched | NotClaimed]

    def claimed(self) -> bool:
        """Once the fetch is over: whether this worker took the batch (a failed fetch counts as not)."""
        return self.page.exception() is None and not isinstance(self.page.result(), NotClaimed)


@dataclass(frozen=True)
class FilteredBatch:
    """A batch filtered into the messages to produce (dead letters for the dead-letter topic among them).

    :param skipped: the batch lies below the first crawl's expiry cutoff and was not fetched.
    :param prior: the counts of an earlier attempt that already delivered the batch (it is only recorded done).
    """

    batch: Batch
    messages: Sequence[Message] = ()
    fetched: int = 0
    kept: int = 0
    expired: int = 0
    dead_letters: tuple[DeadLetter, ...] = ()
    cutoff: int = 0
    skipped: bool = False
    prior: RunCounts | None = None

    def outcome(self, published: int) -> BatchOutcome:
        """The finished batch, once Kafka confirmed ``published`` messages to the task's topic."""
        if self.prior is not None:
            counts = replace(self.prior, batches_done=1, batches_skipped=0)
            return BatchOutcome(self.batch, counts, (), self.cutoff)
        counts = RunCounts(
            pages=0 if self.skipped else 1,
            fetched=self.fetched,
            kept=self.kept,
            published=published,
            expired=self.expired,
            dead_lettered=len(self.dead_letters),
            batches_done=1,
        )
        return BatchOutcome(self.batch, counts, self.dead_letters, self.cutoff, self.skipped)


class BatchFilter:
    """Turns a fetched page into the messages of its batch, and finds a first crawl's early stop.

    :param run: the run (its window, id and config).
    :param early_stop: whether this is a first crawl, where pages with nothing in the window end the crawl.
    """

    def __init__(self, run: RunContext, early_stop: bool) -> None:
        self.cfg = run.cfg
        self.run_id = run.run_id
        self.window: Window = run.window.in_zone(self.cfg.filter.rule.tz)
        self.headers = [("crawl_task", self.cfg.id.encode()), ("run_id", run.run_id.encode())]
        self.transform: Transform | None = load_transform(self.cfg)
        self.early_stop = early_stop
        self.empty_streak = 0

    def filter(self, batch: Batch, records: Sequence[Any]) -> FilteredBatch:
        """Filter a fetched page into messages (nothing is produced yet); a short page is an error."""
        cfg = self.cfg
        if len(records) != batch.size:
            raise SourceError(
                f"task {cfg.id}: page [{batch.lo}, {batch.hi}) returned {len(records)} records, "
                f"expected {batch.size} (short page or shrinking source); not marked done",
                retriable=True,
            )
        try:
            page = build_messages(
                records, batch.lo, cfg.filter.rule, self.window, cfg.kafka.key_field, self.headers, self.transform
            )
        except ValueError as exc:
            raise SourceError(
                f"task {cfg.id}: {exc}; the source sent something that is not a record", retriable=False
            ) from exc
        published, oversized = too_large(page.messages, records, batch.lo, cfg.kafka.max_message_bytes)
        dead_letters = [*page.dead_letters, *oversized]
        messages: list[Message] = published
        dlq = cfg.kafka.dead_letter_topic
        if dlq is not None and dead_letters:
            dead = dead_letter_messages(dead_letters, dlq, cfg.id, self.run_id, cfg.kafka.key_field, self.headers)
            messages = [*published, *dead]
        return FilteredBatch(
            batch,
            messages,
            fetched=len(records),
            kept=len(published),
            expired=page.expired,
            dead_letters=tuple(dead_letters),
            cutoff=self.cutoff_after(batch, page.kept),
        )

    def cutoff_after(self, batch: Batch, kept: int) -> int:
        """On a first crawl, ``max_expired_batches`` consecutive pages with nothing in the window make
        everything below this batch expired (0: no cutoff)."""
        if not self.early_stop:
            return 0
        self.empty_streak = 0 if kept else self.empty_streak + 1
        if self.empty_streak < self.cfg.max_expired_batches:
            return 0
        log.info(
            "task %s: %d consecutive pages without in-window records; offsets below %d are treated as expired",
            self.cfg.id,
            self.empty_streak,
            batch.lo,
        )
        return batch.lo


class ChunkCrawler:
    """Fetch, filter, publish and checkpoint the batches of one chunk, newest first.

    Per batch, in plan order: claim + fetch (on the fetch threads, ``source.concurrency`` batches ahead: a batch
    is claimed before its fetch starts) -> filter -> publish -> confirm -> finish. Two threads share the work of
    the batches in hand: the checkpoint thread waits for Kafka to confirm batch N and, once batch N+1's page is
    in, records N done and renews N+1's claim in one transaction, while the chunk's thread filters batch N+1;
    batch N+1 is produced only once batch N is recorded done. So at most one batch is produced and not yet done, and a
    crash re-publishes at most that batch (fetched pages are not published yet and are simply fetched again).
    A batch is produced only while this worker still holds its claim, so a run cancelled in the UI, or a worker
    whose lease was taken over, stops instead of publishing.

    A first crawl has two stops. The probed floor (``plan``: a search for the window's start, minus
    ``max_expired_batches`` batches of margin) bounds the plan: batches below it are never planned. The
    streak cutoff (:meth:`BatchFilter.cutoff_after`, shared by every chunk of the run through its run
    record) can only stop earlier: when ``max_expired_batches`` consecutive pages above the floor hold
    nothing in the window (records out of time order, a gap in the dates), batches below that page are
    finished as expired without being fetched (a page a fetch thread had already read is filtered like any other).

    :param cfg: the crawl task.
    :param batches: the chunk's batches, newest first.
    :param label: the chunk's label (its offsets), for logs and the result.
    :param source: where pages come from.
    :param batch_filter: turns pages into messages.
    :param ledger: where batches are claimed and finished (``claim`` is called from the fetch threads).
    :param publisher: where messages go.
    """

    def __init__(
        self,
        cfg: CrawlTaskConfig,
        batches: Sequence[Batch],
        label: str,
        source: SourceApiHook,
        batch_filter: BatchFilter,
        ledger: Ledger,
        publisher: Publisher,
    ) -> None:
        self.cfg, self.batches, self.label = cfg, list(batches), label
        self.source, self.filter, self.ledger, self.publisher = source, batch_filter, ledger, publisher
        self.counts = RunCounts()  # of finished batches: written by the checkpoint thread only
        self.skipped = 0  # batches done or held by another worker: counted by the chunk's thread only
        self.cutoff = 0  # the run's expiry cutoff as last seen: batches at or below it are not fetched

    def crawl(self) -> ChunkResult:
        # Airflow's heap is large by now; full collections over it stalled chunks for 0.4 s at a time.
        # Pages are acyclic and freed by reference counting, so freeze what exists before the loop.
        gc.freeze()
        started = time.monotonic()
        sent: FilteredBatch | None = None  # produced, not yet confirmed and finished
        current: Batch | None = None  # claimed, not yet produced
        try:
            with (
                ThreadPoolExecutor(self.cfg.source.concurrency, thread_name_prefix="fetch") as pool,
                ThreadPoolExecutor(1, thread_name_prefix="checkpoint") as checkpoint,
            ):
                for ahead in self.fetches(pool):
                    batch = current = ahead.batch
                    finishing = checkpoint.submit(self.finish, sent, ahead) if sent is not None else None
                    try:
                        ready = self.filtered(ahead)
                    finally:  # a failed filter still lets the batch sent before finish; then it fails
                        held = finishing.result() if finishing is not None else None
                        sent = None
                    if ready is None:
                        current = None
                        continue
                    if held is None:
                        held = self.finish(None, ahead) if ready.messages else True
                    self.publish(ready, held)
                    sent, current = ready, None
                    log_progress(self, batch, started)
                self.finish(sent)
                sent = None
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            log.error("task %s chunk %s failed: %s", self.cfg.id, self.label, message)
            in_flight = [b for b in (sent.batch if sent else None, current) if b is not None]
            self.ledger.fail(in_flight, message)
            raise
        finally:
            self.source.close()
            self.publisher.close()
            self.ledger.close()
        counts = self.counts + RunCounts(batches_skipped=self.skipped)
        return ChunkResult(self.label, counts, time.monotonic() - started)

    def fetches(self, pool: ThreadPoolExecutor) -> Iterator[Ahead]:
        """Submit the claims and fetches of the batches ahead, ``concurrency`` deep; yield them in plan order."""
        ahead: deque[Ahead] = deque()
        todo = iter(self.batches)
        while True:
            while len(ahead) < self.cfg.source.concurrency and (batch := next(todo, None)) is not None:
                ahead.append(Ahead(batch, pool.submit(self.fetch, batch)))
            if not ahead:
                return
            yield ahead.popleft()

    def fetch(self, batch: Batch) -> Fetched | NotClaimed:
        """On a fetch thread: claim ``batch``, then read its page, unless an earlier attempt delivered it (its
        counts) or it lies below the expiry cutoff (None)."""
        if not self.ledger.claim(batch):
            return NOT_CLAIMED
        prior = self.publisher.delivered(batch)
        if prior is not None:
            return prior
        if batch.hi <= self.cutoff:
            return None
        return self.source.get_page(batch.lo, batch.size)

    def filtered(self, ahead: Ahead) -> FilteredBatch | None:
        """The batch filtered into its messages; None when it is done or held by another worker."""
        batch, page = ahead.batch, ahead.page.result()
        if isinstance(page, NotClaimed):
            self.skipped += 1
            log.info(
                "task %s: batch [%d, %d) is done or held by another worker; skipped", self.cfg.id, batch.lo, batch.hi
            )
            return None
        if isinstance(page, RunCounts):
            log.info(
                "task %s: batch [%d, %d) was delivered by an earlier attempt; recorded done",
                self.cfg.id,
                batch.lo,
                batch.hi,
            )
            return FilteredBatch(batch, prior=page, cutoff=self.filter.cutoff_after(batch, page.kept))
        if page is None:  # its fetch thread saw the expiry cutoff: not read
            return FilteredBatch(batch, skipped=True)
        return self.filter.filter(batch, page)

    def finish(self, sent: FilteredBatch | None, then: Ahead | None = None) -> bool:
        """Wait until Kafka confirmed every message of ``sent``, then record it done; in the same transaction,
        renew the claim of ``then``, the batch to be produced next. Runs on the checkpoint thread while the
        chunk's thread filters ``then``. The transaction waits for ``then``'s page, so the claim is checked just
        before the batch is produced, however long the source took.

        :return: whether this worker still holds ``then``'s claim (True when none is given).
        """
        published = self.publisher.confirm() if sent is not None else 0
        renew = then.batch if then is not None and then.claimed() else None
        held = then is None or renew is not None  # a batch its fetch thread could not take is not ours
        if sent is None:
            return held and (renew is None or self.ledger.renew(renew))
        outcome = sent.outcome(published=published)
        cutoff, renewed = self.ledger.finish(outcome, renew)
        self.counts += outcome.counts
        self.cutoff = max(self.cutoff, outcome.cutoff, cutoff)
        return held and renewed

    def publish(self, ready: FilteredBatch, held: bool) -> None:
        """Produce a batch, only while this worker still holds its claim."""
        if ready.messages and not held:
            raise StatusTableError(
                f"task {self.cfg.id}: batch [{ready.batch.lo}, {ready.batch.hi}) is no longer claimed by this "
                "worker (the run was cancelled, or its lease expired and another worker took it); stopping "
                "before publishing it"
            )
        self.publisher.send(ready.batch, ready.messages, ready.outcome(published=ready.kept).counts)


def too_large(
    messages: list[Message], records: Sequence[Any], first_offset: int, limit: int
) -> tuple[list[Message], list[DeadLetter]]:
    """Split off the messages Kafka would refuse (key and value over ``limit`` bytes): dead letters with their
    size, the record stored cut to the dead-letter size cap, instead of a batch that fails at every attempt."""
    if all(len(m.value) + len(m.key) <= limit for m in messages):
        return messages, []
    kept: list[Message] = []
    dead: list[DeadLetter] = []
    for message in messages:
        size = len(message.value) + len(message.key)
        if size <= limit:
            kept.append(message)
            continue
        offset = int(dict(message.headers)["source_offset"])
        reason = f"message of {size} bytes is larger than kafka.max_message_bytes ({limit}); not published"
        dead.append(DeadLetter(offset, reason, cap_record(dead_letter_record(records[offset - first_offset]))))
    return kept, dead


def log_progress(crawler: ChunkCrawler, batch: Batch, started: float) -> None:
    """Every 10 batches and at the end: task, chunk, batches done and percent, offset, counts, records/s."""
    done, counts, planned = crawler.counts.batches_done, crawler.counts, len(crawler.batches)
    if done % 10 and done != planned:
        return
    log.info(
        "task %s %s: %d/%d batches (%.0f%%), at offset %d; fetched=%d kept=%d published=%d expired=%d "
        "dead=%d (%.0f records/s)",
        crawler.cfg.id,
        crawler.label,
        done,
        planned,
        100.0 * done / max(planned, 1),
        batch.lo,
        counts.fetched,
        counts.kept,
        counts.published,
        counts.expired,
        counts.dead_lettered,
        counts.fetched / max(time.monotonic() - started, 1e-6),
    )


def load_transform(cfg: CrawlTaskConfig) -> Transform | None:
    if cfg.transform is None:
        return None
    try:
        transform = import_string(cfg.transform)
    except ImportError as exc:
        raise ConfigError(f"task {cfg.id}: transform '{cfg.transform}' cannot be imported: {exc}") from exc
    return bind_task_id(transform, cfg.id)


def crawl_chunk(run: RunContext, payload: ChunkPlan) -> dict[str, Any]:
    """Crawl one planned chunk (``payload``: its label, batches and whether it is a first crawl); returns
    the chunk's result for XCom. The run's kind picks the ledger and the publisher, here and nowhere else."""
    owner = f"{run.run_id}|{run.map_index}"
    token = f"{owner}|{run.try_number}|{uuid.uuid4().hex[:12]}"
    batches = list(payload.batches)
    label = payload.label
    ledger = ledger_for(run, owner, token)
    try:
        batch_filter = BatchFilter(run, early_stop=payload.early_stop)
        publisher = publisher_for(run, batches, ledger)
    except Exception as exc:
        # A chunk that cannot start (a transform that does not import, Kafka transactions refused) names why on
        # the run, like a chunk that fails on a batch.
        log.error("task %s chunk %s could not start: %s: %s", run.cfg.id, label, type(exc).__name__, exc)
        ledger.fail([], f"{type(exc).__name__}: {exc}")
        ledger.close()
        raise
    crawler = ChunkCrawler(run.cfg, batches, label, run.source(), batch_filter, ledger, publisher)
    return crawler.crawl().to_dict()


def publisher_for(run: RunContext, batches: Sequence[Batch], ledger: Ledger) -> Publisher:
    """Nothing for a dry run; the idempotent producer; or, for exactly-once delivery, Kafka transactions with the
    batches' markers (replays and backfills re-publish by design: transactions without markers)."""
    cfg = run.cfg
    if run.params.dry_run:
        return DryRunPublisher()
    hook = IdempotentProducerHook(cfg.kafka.conn_id)
    if cfg.kafka.delivery == "at_least_once":
        return KafkaPublisher(hook.get_producer(), cfg.kafka.topic, cfg.id)
    markers = None
    if run.uses_status_table:
        generations = ledger.generations(batches)
        markers = MarkerLog(hook.client_config(), cfg.marker_topic, cfg.id, run.run_id, generations)
    tid = transactional_id(cfg.id, batches, None if run.uses_status_table else run.run_id)
    return TransactionalPublisher(hook.transactional_producer(tid), cfg.kafka.topic, cfg.id, markers)
