"""Step 2 of a crawl run, the DAG's mapped ``crawl_chunk`` task: fetch, filter, publish, checkpoint.

Per batch, in plan order (newest first): claim -> fetch -> filter -> publish -> confirm -> record done. Three kinds
of thread share a chunk's work, and only these:

- ``source.concurrency`` **fetch threads** (:meth:`ChunkCrawler.fetch`) claim batches and read their pages ahead,
  ``concurrency`` deep; a batch is claimed before its page is requested. A fetch ends as one of four
  :data:`Fetched` types: its page, the counts of an earlier attempt that delivered it, below the expiry cutoff
  (not read), or not claimed (done or held by another worker: not read).
- **the chunk's thread** (:meth:`ChunkCrawler.crawl`) takes the fetches in plan order, filters each page
  (:class:`~crawler_ops.crawl.batch_filter.BatchFilter`) and produces the batch (the publisher's ``send``), but only
  once the checkpoint thread has recorded the batch before it done and renewed its claim.
- **the checkpoint thread** (:class:`Checkpoint`) waits for Kafka to confirm every message of the batch produced
  last (the publisher's ``confirm``), then records it done and, in the same transaction, renews the claim of the
  batch to be produced next, while the chunk's thread filters that batch. It is the only thread that records a
  batch done or renews a claim.

So a batch is recorded done only after Kafka confirmed all its messages, at most one batch is produced and not
yet done, and a crash re-publishes at most that batch (fetched pages are not published yet and are simply fetched
again). A batch is produced only while this worker still holds its claim, so a run cancelled in the UI, or a
worker whose lease was taken over, stops instead of publishing. The counters the threads share (counts of batches
done, batches skipped, the run's expiry cutoff) sit behind one lock in :class:`SharedCounts`.

The watermark moves later, in the commit (:func:`crawler_ops.crawl.steps.commit_run`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.batch_filter import BatchFilter, FilteredBatch
from crawler_ops.crawl.heap import chunk_heap
from crawler_ops.crawl.ledger import Ledger, ledger_for
from crawler_ops.crawl.page_check import PageChecker
from crawler_ops.crawl.publishers import publisher_for
from crawler_ops.crawl.run import RunContext
from crawler_ops.drift import FieldProfile, profile_values
from crawler_ops.errors import PageSkippedError, SourceDeferral, SourceError, StatusTableError
from crawler_ops.hooks.kafka.producer import Publisher
from crawler_ops.hooks.source.budget import ByteBudget, PageAccount
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.planning import Batch, ChunkPlan
from crawler_ops.results import BatchOutcome, ChunkResult, ChunkResume, RunCounts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PageRead:
    """The batch's page, as the source sent it."""

    records: Sequence[Any]


@dataclass(frozen=True)
class Delivered:
    """An earlier attempt delivered the batch for good: its counts (the batch is only recorded done)."""

    counts: RunCounts


@dataclass(frozen=True)
class BelowCutoff:
    """The batch lies below the first crawl's expiry cutoff: not read, recorded done as expired."""


@dataclass(frozen=True)
class SkippedByRule:
    """A skip rule of ``source.responses`` matched the batch's page: recorded done with one dead letter."""

    reason: str
    envelope: Any


@dataclass(frozen=True)
class NotClaimed:
    """The batch is done or held by another worker: nothing was read, nothing is recorded."""


# How a batch's fetch ends.
Fetched = PageRead | Delivered | BelowCutoff | SkippedByRule | NotClaimed


@dataclass(frozen=True)
class Ahead:
    """A batch handed to a fetch thread, which claims it and then reads its page; ``memory`` counts the page's body
    against the chunk's memory budget until the chunk's thread is done with it."""

    batch: Batch
    page: Future[Fetched]
    memory: PageAccount

    def claimed(self) -> bool:
        """Once the fetch is over: whether this worker took the batch (a failed fetch counts as not)."""
        return self.page.exception() is None and not isinstance(self.page.result(), NotClaimed)


class SharedCounts:
    """What a chunk's threads count together, behind one lock: the counts of the batches recorded done (added by
    the checkpoint thread), the batches skipped as not claimed (by the chunk's thread), and the run's expiry
    cutoff as last seen (raised by the checkpoint thread, read by the fetch threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = RunCounts()
        self._skipped = 0
        self._cutoff = 0

    def add_done(self, outcome: BatchOutcome, run_cutoff: int) -> None:
        """A batch recorded done, and the run's cutoff its transaction read (0: none)."""
        with self._lock:
            self._done += outcome.counts
            self._cutoff = max(self._cutoff, outcome.cutoff, run_cutoff)

    def add_skipped(self) -> None:
        with self._lock:
            self._skipped += 1

    def cutoff(self) -> int:
        """Batches at or below this offset are not fetched (0: no cutoff)."""
        with self._lock:
            return self._cutoff

    def counts(self) -> RunCounts:
        with self._lock:
            return self._done + RunCounts(batches_skipped=self._skipped)


@dataclass
class InFlight:
    """What a failure gives back; kept by the chunk's thread only.

    :param sent: the batch produced and not yet recorded done.
    :param current: the batch claimed and not yet produced.
    """

    sent: FilteredBatch | None = None
    current: Batch | None = None

    def batches(self) -> list[Batch]:
        return [b for b in (self.sent.batch if self.sent else None, self.current) if b is not None]


class Checkpoint:
    """The checkpoint thread, and the only caller of the publisher's ``confirm`` and of the ledger's ``finish``
    and ``renew``; a context manager, whose thread ends with the block once its work is done.

    :param publisher: where the batches went.
    :param ledger: where batches are recorded done and claims renewed.
    :param shared: the chunk's shared counters, which a batch recorded done adds to.
    :param drift_sample: the published records of a batch profiled for the run's drift report.
    """

    def __init__(self, publisher: Publisher, ledger: Ledger, shared: SharedCounts, drift_sample: int) -> None:
        self.publisher, self.ledger, self.shared = publisher, ledger, shared
        self.drift_sample = drift_sample
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._thread.shutdown(wait=True)

    def submit(self, sent: FilteredBatch | None, then: Ahead | None = None) -> Future[bool]:
        """Record ``sent`` done and renew the claim of ``then`` (see :meth:`record`), on the checkpoint thread."""
        return self._thread.submit(self.record, sent, then)

    def record(self, sent: FilteredBatch | None, then: Ahead | None) -> bool:
        """Wait until Kafka confirmed every message of ``sent``, then record it done; in the same transaction,
        renew the claim of ``then``, the batch to be produced next. The transaction waits for ``then``'s fetch,
        so the claim is checked just before the batch is produced, however long the source took.

        :return: whether this worker still holds ``then``'s claim (True when none is given).
        """
        self.ledger.connect()  # before waiting for ``then``'s fetch: the chunk's first page comes in meanwhile
        published = self.publisher.confirm() if sent is not None else 0
        renew = then.batch if then is not None and then.claimed() else None
        held = then is None or renew is not None  # a batch its fetch thread could not take is not ours
        if sent is None:
            return held and (renew is None or self.ledger.renew(renew))
        outcome = replace(sent.outcome(published=published), profile=published_profile(sent, self.drift_sample))
        run_cutoff, renewed = self.ledger.finish(outcome, renew)
        self.shared.add_done(outcome, run_cutoff)
        return held and renewed


class ChunkDeferred(Exception):
    """A deferrable chunk stopped at a batch boundary to wait for its source (``wait_s`` seconds, as asked): every
    batch before ``resume.index`` is recorded done, the batches from there on are still this worker's claims (its
    next leg, the same worker, takes them over at once) and no attempt was counted against them."""

    def __init__(self, message: str, resume: ChunkResume, wait_s: float) -> None:
        super().__init__(message)
        self.resume, self.wait_s = resume, wait_s


class ChunkCrawler:
    """Fetch, filter, publish and checkpoint one chunk's batches, newest first, on the module's threads (above).

    A first crawl has two stops. The probed floor (``plan``: the window's start less ``max_expired_batches``
    batches) bounds the plan. The streak cutoff (:meth:`BatchFilter.cutoff_after`, shared by the run's chunks through
    its run record) can only stop earlier: after ``max_expired_batches`` consecutive pages with nothing in the
    window, older batches are finished as expired unfetched (a page already read is filtered like any other).

    :param cfg: the crawl task.
    :param batches: the chunk's batches, newest first.
    :param label: the chunk's label (its offsets), for logs and the result.
    :param source: where pages come from.
    :param batch_filter: turns pages into messages.
    :param ledger: where batches are claimed (by the fetch threads) and recorded done (by the checkpoint thread).
    :param publisher: where messages go.
    :param start: the legs before this one, when the chunk deferred: ``batches`` are those from ``start.index`` on.
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
        start: ChunkResume | None = None,
    ) -> None:
        self.cfg, self.batches, self.label = cfg, list(batches), label
        self.start = start or ChunkResume()
        self.source, self.filter, self.ledger, self.publisher = source, batch_filter, ledger, publisher
        self.shared, self.in_flight = SharedCounts(), InFlight()
        self.memory = ByteBudget.for_source(cfg.source)
        self.sent_memory: PageAccount | None = None
        self.pages: PageChecker | None = None  # while crawling

    def crawl(self) -> ChunkResult:
        started = time.monotonic()
        try:
            with (
                chunk_heap(),
                page_checker(self.cfg.id, self.source) as self.pages,
                ThreadPoolExecutor(self.cfg.source.concurrency, thread_name_prefix="fetch") as fetch_threads,
                self.memory,  # closed first on the way out: a fetch waiting for it must not hold up the shutdown
                Checkpoint(self.publisher, self.ledger, self.shared, self.cfg.drift_sample) as checkpoint,
            ):
                for ahead in self.fetches(fetch_threads):
                    self.in_flight.current = ahead.batch
                    checkpointed = checkpoint.submit(self.in_flight.sent, ahead)
                    ready, held = self.filtered_while_checkpointing(checkpointed, ahead)
                    if ready is not None:
                        self.publish(ready, held)
                        self.log_progress(ahead.batch.lo, time.monotonic() - started)
                checkpoint.submit(self.in_flight.sent).result()
                self.in_flight.sent = None
                self.release_sent()
        except SourceDeferral as exc:
            raise self.deferred(exc, time.monotonic() - started) from exc
        except Exception as exc:
            self.give_back(exc)
            raise
        finally:
            self.close()
        elapsed = time.monotonic() - started + self.start.elapsed_s
        return ChunkResult(self.label, self.start.counts + self.shared.counts(), elapsed, self.start.deferrals)

    def deferred(self, exc: SourceDeferral, elapsed_s: float) -> Exception:
        """The chunk stops at the batch whose request must wait (the batches before it are recorded done): where
        its next leg starts. After ``max_retries`` deferrals in a row that finished no batch, it fails instead,
        retriable, its batches in flight given back with the error."""
        current = self.in_flight.current
        assert current is not None and self.in_flight.sent is None, "a deferral is raised by a batch's fetch only"
        counts = self.shared.counts()
        stalls = 0 if counts.batches_done else self.start.stalls + 1
        if stalls > self.cfg.source.max_retries:
            error = SourceError(
                f"task {self.cfg.id} chunk {self.label}: deferred {stalls} times in a row without finishing a batch "
                f"(source.max_retries {self.cfg.source.max_retries}); last: {exc}",
                retriable=True,
            )
            self.give_back(error)
            return error
        index = self.start.index + self.batches.index(current)
        legs = self.start
        resume = ChunkResume(index, legs.counts + counts, legs.elapsed_s + elapsed_s, legs.deferrals + 1, stalls)
        log.info(
            "task %s chunk %s: deferred at batch %s for %.3gs (%d batches done in this leg): %s",
            self.cfg.id,
            self.label,
            current,
            exc.wait_s,
            counts.batches_done,
            exc,
        )
        return ChunkDeferred(f"task {self.cfg.id} chunk {self.label}: {exc}", resume, exc.wait_s)

    def fetches(self, fetch_threads: ThreadPoolExecutor) -> Iterator[Ahead]:
        """Submit the claims and fetches of the batches ahead, ``concurrency`` deep; yield them in plan order."""
        ahead: deque[Ahead] = deque()
        depth = self.cfg.source.concurrency
        for index, batch in enumerate(self.batches):
            memory, then = self.memory.account(), self.batches[index + 1 : index + depth]
            ahead.append(Ahead(batch, fetch_threads.submit(self.fetch, batch, memory, then), memory))
            if len(ahead) == depth:
                yield ahead.popleft()
        while ahead:
            yield ahead.popleft()

    def fetch(self, batch: Batch, memory: PageAccount, then: Sequence[Batch] = ()) -> Fetched:
        """On a fetch thread: claim ``batch`` (the ledger may claim ``then``, the batches after it, with it), then read
        its page unless it needs no reading (its body counted against ``memory``)."""
        if not self.ledger.claim(batch, then):
            return NotClaimed()
        prior = self.publisher.delivered(batch)
        if prior is not None:
            return Delivered(prior)
        if batch.hi <= self.shared.cutoff():
            return BelowCutoff()
        with memory.reading():
            return read_page(self.source, batch, self.cfg.id, self.pages)

    def filtered_while_checkpointing(
        self, checkpointed: Future[bool], ahead: Ahead
    ) -> tuple[FilteredBatch | None, bool]:
        """Filter ``ahead``'s batch while the checkpoint thread records the batch sent before it done; the batch
        (None when it is not this worker's) and whether this worker still holds its claim."""
        try:
            ready = self.filtered(ahead)
        finally:  # a failed filter still lets the batch sent before it be recorded done; then it fails
            held = checkpointed.result()
            self.in_flight.sent = None
            self.release_sent()
            # Only now may the next page read as the head: the batch sent before no longer holds its body.
            ahead.memory.filtered()
        if ready is None:
            self.in_flight.current = None
            ahead.memory.release()
        else:
            self.sent_memory = ahead.memory  # its messages keep slices of the body until Kafka confirmed them
        return ready, held

    def release_sent(self) -> None:
        if self.sent_memory is not None:
            self.sent_memory.release()
            self.sent_memory = None

    def filtered(self, ahead: Ahead) -> FilteredBatch | None:
        """The batch filtered into its messages; None when it is done or held by another worker."""
        batch = ahead.batch
        match ahead.page.result():
            case PageRead(records):
                return self.filter.filter(batch, records)
            case SkippedByRule(reason, envelope):
                return self.filter.skipped_by_rule(batch, reason, envelope)
            case BelowCutoff():  # its fetch thread saw the expiry cutoff: not read
                return FilteredBatch(batch, skipped=True)
            case Delivered(counts):
                log.info("task %s: batch %s was delivered by an earlier attempt; recorded done", self.cfg.id, batch)
                return FilteredBatch(batch, prior=counts, cutoff=self.filter.cutoff_after(batch, counts.kept))
            case NotClaimed():
                self.shared.add_skipped()
                log.info("task %s: batch %s is done or held by another worker; skipped", self.cfg.id, batch)
                return None

    def publish(self, ready: FilteredBatch, held: bool) -> None:
        """Produce a batch, only while this worker still holds its claim."""
        if ready.messages and not held:
            raise StatusTableError(
                f"task {self.cfg.id}: batch [{ready.batch.lo}, {ready.batch.hi}) is no longer claimed by this "
                "worker (the run was cancelled, or its lease expired and another worker took it); stopping "
                "before publishing it"
            )
        self.publisher.send(ready.batch, ready.messages, ready.outcome(published=ready.kept).counts)
        self.in_flight.sent, self.in_flight.current = ready, None

    def give_back(self, exc: Exception) -> None:
        """Hand the batches in flight back to the ledger with the error."""
        message = f"{type(exc).__name__}: {exc}"
        log.error("task %s chunk %s failed: %s", self.cfg.id, self.label, message)
        self.ledger.fail(self.in_flight.batches(), message)

    def close(self) -> None:
        self.source.close()
        self.publisher.close()
        self.ledger.close()

    def log_progress(self, offset: int, elapsed_s: float) -> None:
        """Every 10 batches and once every batch is done: task, chunk, batches done and percent, the offset reached,
        counts, records/s (over ``elapsed_s``)."""
        counts, planned = self.shared.counts(), len(self.batches)
        done = counts.batches_done
        if done % 10 and done != planned:
            return
        log.info(
            "task %s %s: %d/%d batches (%.0f%%), at offset %d; fetched=%d kept=%d published=%d expired=%d "
            "dead=%d (%.0f records/s)",
            self.cfg.id,
            self.label,
            done,
            planned,
            100.0 * done / max(planned, 1),
            offset,
            counts.fetched,
            counts.kept,
            counts.published,
            counts.expired,
            counts.dead_lettered,
            counts.fetched / max(elapsed_s, 1e-6),
        )


def published_profile(sent: FilteredBatch, sample: int) -> FieldProfile:
    """The drift profile of the first ``sample`` published values of a batch, on the checkpoint thread while the
    chunk's thread filters the next page. Its first ``kept`` messages are the published records; dead letters for the
    dead-letter topic follow them."""
    return profile_values((message.value for message in sent.messages[: sent.kept]), sample)


def page_checker(task: str, source: SourceApiHook) -> PageChecker:
    """A chunk's page checker. While its helper runs, the helper finds each page's records in its body and reads the
    fields of each the filter needs; ``source``'s page decode no longer does (unless the helper could not)."""
    checker = PageChecker(task, source.fields, source.source.records_path)
    if checker.running:
        source.fields, source.split = (), checker.split
    return checker


def read_page(
    source: SourceApiHook, batch: Batch, task: str, pages: PageChecker | None = None
) -> PageRead | SkippedByRule:
    """The batch's page (whole, when it is a page of a filtered view), or the skip rule of ``source.responses`` it
    matched. ``pages``: checks the page for UTF-8 and reads its records' fields (on the fetch thread, while the chunk's
    thread filters another)."""
    try:
        page = source.get_page(batch.lo, batch.size)
    except PageSkippedError as exc:
        return SkippedByRule(str(exc), exc.envelope)
    source.paging.check_view_page(len(page), batch.lo, batch.hi, task)
    if pages is not None:
        page = pages.checked(page)
    return PageRead(page)


def crawl_offsets(run: RunContext, payload: ChunkPlan, resume: ChunkResume | None = None) -> dict[str, Any]:
    """Crawl one planned chunk of batches (``payload``: its label, batches and whether it is a first crawl); returns
    the chunk's result for XCom. The run's kind picks the ledger and the publisher, here and nowhere else.

    ``resume``: the chunk may defer (:class:`ChunkDeferred`, with ``source.defer_after_s``), and starts where its
    last leg stopped; None: it never defers."""
    owner = f"{run.run_id}|{run.map_index}"
    token = f"{owner}|{run.try_number}|{uuid.uuid4().hex[:12]}"
    batches = list(payload.batches)
    label = payload.label
    ledger = ledger_for(run, owner, token)
    try:
        batch_filter = BatchFilter(run, early_stop=payload.early_stop, schema_id=payload.schema_id)
        publisher = publisher_for(run, batches, ledger, payload.schema_id)  # every leg: the chunk's transactional id
    except Exception as exc:
        # A chunk that cannot start (a transform that does not import, Kafka transactions refused) names why on
        # the run, like a chunk that fails on a batch.
        log.error("task %s chunk %s could not start: %s: %s", run.cfg.id, label, type(exc).__name__, exc)
        ledger.fail([], f"{type(exc).__name__}: {exc}")
        ledger.close()
        raise
    start = resume or ChunkResume()
    source = run.source(defers=resume is not None)
    crawler = ChunkCrawler(run.cfg, batches[start.index :], label, source, batch_filter, ledger, publisher, start)
    result = crawler.crawl()
    # The last batch is recorded done after the loop's last progress line: the line of the chunk done.
    crawler.log_progress(min((b.lo for b in batches), default=0), result.elapsed_s)
    return result.to_dict()
