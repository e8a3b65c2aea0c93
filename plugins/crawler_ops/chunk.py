"""Step 2 of a crawl run, the DAG's mapped ``crawl_chunk`` task: fetch, filter, publish, checkpoint.

Where things happen, in one place:
- fetched: :meth:`SourceApiHook.get_page` (prefetched by a small thread pool in :meth:`ChunkCrawler.crawl`);
- filtered: :func:`crawler_ops.records.build_messages`;
- published: :meth:`BatchPublisher.send` and :meth:`BatchPublisher.confirm`, which waits for every delivery report;
- checkpointed: :meth:`CrawlStoreHook.complete` (batch done), then :func:`crawler_ops.commit.commit_run` (watermark).
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow.sdk.module_loading import import_string

from crawler_ops import metrics
from crawler_ops.config import CrawlTaskConfig
from crawler_ops.errors import ConfigError, CrawlerError, SourceError, StatusTableError
from crawler_ops.hooks.producer import BatchPublisher, IdempotentProducerHook
from crawler_ops.hooks.store import BatchOutcome
from crawler_ops.planning import Batch
from crawler_ops.records import Message, PageResult, Transform, build_messages, dead_letter_messages
from crawler_ops.run import RunContext

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A filtered batch: its outcome so far and the messages to produce (``dead`` of them dead letters)."""

    outcome: BatchOutcome
    messages: list[Message]
    dead: int = 0


@dataclass
class ChunkCounts:
    pages: int = 0
    fetched: int = 0
    kept: int = 0
    published: int = 0
    expired: int = 0
    dead_lettered: int = 0
    batches_done: int = 0
    batches_skipped: int = 0


class ChunkCrawler:
    """Fetch, filter, publish and checkpoint the batches of one chunk, newest first.

    Pages are prefetched by ``source.concurrency`` threads; each batch is claimed before its fetch starts,
    published, confirmed by Kafka, and only then marked done, so a crash re-publishes at most the batch
    in flight (prefetched pages are not yet published and are simply fetched again).
    """

    def __init__(self, run: RunContext, payload: Mapping[str, Any]) -> None:
        self.run = run
        self.cfg = run.cfg
        self.batches = [Batch(lo, hi) for lo, hi in payload["batches"]]
        self.early_stop = bool(payload.get("early_stop"))
        self.label = str(payload.get("label", ""))
        self.owner = f"{run.run_id}|{run.map_index}"
        self.token = f"{self.owner}|{run.try_number}|{uuid.uuid4().hex[:12]}"
        self.counts = ChunkCounts()
        self.cutoff = 0
        self.empty_streak = 0
        self.transform: Transform | None = load_transform(self.cfg)
        self.window = run.window.in_zone(self.cfg.filter.rule.tz)
        self.headers = [("crawl_task", self.cfg.id.encode()), ("run_id", run.run_id.encode())]
        self.source = run.source()
        self.store = run.store() if not run.params.dry_run else None
        self.publisher = (
            None
            if run.params.dry_run
            else BatchPublisher(
                IdempotentProducerHook(self.cfg.kafka.conn_id).get_producer(), self.cfg.kafka.topic, self.cfg.id
            )
        )

    def claim(self, batch: Batch) -> bool:
        if self.store is None or not self.run.uses_status_table:
            return True
        return self.store.claim(batch, self.owner, self.token, self.cfg.claim_lease_s)

    def claimed_fetches(self, pool: ThreadPoolExecutor) -> Iterator[tuple[Batch, Future[list[Any]] | None]]:
        """Claim and submit fetches ahead, ``concurrency`` pages deep; yield them in plan order."""
        ahead: deque[tuple[Batch, Future[list[Any]] | None]] = deque()
        todo = iter(self.batches)
        while True:
            while len(ahead) < self.cfg.source.concurrency:
                batch = next(todo, None)
                if batch is None:
                    break
                if not self.claim(batch):
                    self.counts.batches_skipped += 1
                    log.info(
                        "task %s: batch [%d, %d) is done or held by another worker; skipped",
                        self.cfg.id,
                        batch.lo,
                        batch.hi,
                    )
                    continue
                skip = batch.hi <= self.cutoff
                ahead.append((batch, None if skip else pool.submit(self.source.get_page, batch.lo, batch.size)))
            if not ahead:
                return
            yield ahead.popleft()

    def crawl(self) -> dict[str, Any]:
        """Per batch: filter it while Kafka confirms the previous one, then confirm and mark that one done,
        then produce this one. At most one batch is produced and not yet done, so a crash re-publishes
        at most that batch."""
        # Airflow's heap is large by now; full collections over it stalled chunks for 0.4 s at a time.
        # Pages are acyclic and freed by reference counting, so freeze what exists before the loop.
        gc.freeze()
        started = time.monotonic()
        sent: Prepared | None = None
        current: Batch | None = None
        try:
            with ThreadPoolExecutor(self.cfg.source.concurrency, thread_name_prefix="fetch") as pool:
                for batch, future in self.claimed_fetches(pool):
                    current = batch
                    try:
                        ready = self.prepare(batch, future)
                    except Exception:
                        if sent is not None:  # the previous batch is fine: finish it before failing
                            self.confirm(sent)
                            sent = None
                        raise
                    held = None
                    if sent is not None:
                        held = self.confirm(sent, then=ready)
                        sent = None
                    self.send(ready, held)
                    sent, current = ready, None
                    self.log_progress(batch, started)
                if sent is not None:
                    self.confirm(sent)
                    sent = None
        except Exception as exc:
            self.fail([b for b in (sent.outcome.batch if sent else None, current) if b is not None], exc)
            raise
        finally:
            self.source.close()
        return {"label": self.label, **asdict(self.counts)}

    def prepare(self, batch: Batch, future: Future[list[Any]] | None) -> Prepared:
        """Take the fetched page and filter it into messages (nothing is produced yet)."""
        if future is None or batch.hi <= self.cutoff:
            if future is not None:
                future.cancel()
            return Prepared(BatchOutcome(batch, 0, 0, 0, 0, skipped_as_expired=True), [])
        records = future.result()
        if len(records) != batch.size:
            raise SourceError(
                f"task {self.cfg.id}: page [{batch.lo}, {batch.hi}) returned {len(records)} records, "
                f"expected {batch.size} (short page or shrinking source); not marked done",
                retriable=True,
            )
        try:
            page = build_messages(
                records,
                batch.lo,
                self.cfg.filter.rule,
                self.window,
                self.cfg.kafka.key_field,
                self.headers,
                self.transform,
            )
        except ValueError as exc:
            raise SourceError(
                f"task {self.cfg.id}: {exc}; the source sent something that is not a record", retriable=False
            ) from exc
        self.counts.pages += 1
        self.counts.fetched += len(records)
        outcome = BatchOutcome(
            batch,
            len(records),
            page.kept,
            0,
            page.expired,
            page.dead_letters,
            cutoff=self.early_stop_cutoff(batch, page),
        )
        dlq = self.cfg.kafka.dead_letter_topic
        if dlq is None or not page.dead_letters:
            return Prepared(outcome, page.messages)
        dead = dead_letter_messages(
            page.dead_letters, dlq, self.cfg.id, self.run.run_id, self.cfg.kafka.key_field, self.headers
        )
        return Prepared(outcome, [*page.messages, *dead], len(dead))

    def early_stop_cutoff(self, batch: Batch, page: PageResult) -> int:
        """On a first crawl, ``max_expired_batches`` consecutive pages with nothing in the window make
        everything below this batch expired (0: no cutoff)."""
        if not self.early_stop:
            return 0
        self.empty_streak = 0 if page.kept else self.empty_streak + 1
        if self.empty_streak < self.cfg.max_expired_batches:
            return 0
        log.info(
            "task %s: %d consecutive pages without in-window records; offsets below %d are treated as expired",
            self.cfg.id,
            self.empty_streak,
            batch.lo,
        )
        return batch.lo

    def checks_claim(self, ready: Prepared) -> bool:
        """Whether producing ``ready`` needs the claim check (something to publish, under the status table)."""
        return (
            bool(ready.messages)
            and self.publisher is not None
            and self.store is not None
            and (self.run.uses_status_table)
        )

    def send(self, ready: Prepared, held: bool | None = None) -> None:
        """Produce a batch's messages, only while this worker still holds its claim: a run cancelled in the UI
        (its claims given back) or a worker whose lease was taken over stops here instead of publishing more.

        :param held: whether the claim was just renewed (in the previous batch's completion), None if not asked.
        """
        if self.publisher is None or not ready.messages:
            return
        batch = ready.outcome.batch
        if self.store is not None and self.run.uses_status_table:
            if held is None:
                held = self.store.renew(batch, self.token)
            if not held:
                raise StatusTableError(
                    f"task {self.cfg.id}: batch [{batch.lo}, {batch.hi}) is no longer claimed by this worker (the "
                    "run was cancelled, or its lease expired and another worker took it); stopping before "
                    "publishing it"
                )
        self.publisher.send(ready.messages)

    def confirm(self, sent: Prepared, then: Prepared | None = None) -> bool | None:
        """Wait until Kafka confirmed every message of the batch, then mark it done.

        :param then: the batch to be produced next; its claim is renewed in the same transaction.
        :return: whether that claim is still held (None when not asked).
        """
        batch = sent.outcome.batch
        published = 0
        if self.publisher is not None and sent.messages:
            published = self.publisher.confirm(f"offsets [{batch.lo}, {batch.hi})") - sent.dead
        renew = then.outcome.batch if then is not None and self.checks_claim(then) else None
        return self.checkpoint(replace(sent.outcome, published=published), renew)

    def checkpoint(self, outcome: BatchOutcome, renew: Batch | None = None) -> bool | None:
        """Mark the batch done with its counts (after Kafka confirmed its messages); renew ``renew``'s claim."""
        self.counts.kept += outcome.kept
        self.counts.published += outcome.published
        self.counts.expired += outcome.expired
        self.counts.dead_lettered += len(outcome.dead_letters)
        self.counts.batches_done += 1
        self.cutoff = max(self.cutoff, outcome.cutoff)
        if self.store is None:
            return None
        token = self.token if self.run.uses_status_table else None
        fenced_in, cutoff, held = self.store.complete(outcome, self.run.run_id, token, renew)
        self.cutoff = max(self.cutoff, cutoff)
        if fenced_in:  # counted once: a batch whose completion failed is retried, one taken over is the other's
            for counter, value in (
                ("fetched", outcome.fetched),
                ("kept", outcome.kept),
                ("published", outcome.published),
                ("expired", outcome.expired),
                ("dead_lettered", len(outcome.dead_letters)),
                ("batches_done", 1),
            ):
                metrics.count(self.cfg.id, counter, value)
        else:
            log.warning(
                "task %s: batch [%d, %d) was re-claimed by another worker after our lease expired; its "
                "messages are published (idempotent by key) but the other worker owns its status",
                self.cfg.id,
                outcome.batch.lo,
                outcome.batch.hi,
            )
        return held

    def fail(self, in_flight: Sequence[Batch], exc: BaseException) -> None:
        """Give the batch in flight back (pending, error recorded) and record the error on the run."""
        message = f"{type(exc).__name__}: {exc}"
        log.error("task %s chunk %s failed: %s", self.cfg.id, self.label, message)
        if self.store is None:
            return
        try:
            if self.run.uses_status_table:
                for batch in in_flight:
                    self.store.release(batch, self.token, message)
            # The error row names the offsets in flight (one batch, or two adjacent ones while pipelined).
            span = Batch(min(b.lo for b in in_flight), max(b.hi for b in in_flight)) if in_flight else None
            self.store.add_run_error(self.run.run_id, message, span)
        except CrawlerError:
            log.exception(
                "task %s: could not record the failure; the commit step releases this run's claims", self.cfg.id
            )

    def log_progress(self, batch: Batch, started: float) -> None:
        done = self.counts.batches_done
        if done % 10 and done != len(self.batches):
            return
        rate = self.counts.fetched / max(time.monotonic() - started, 1e-6)
        log.info(
            "task %s %s: %d/%d batches (%.0f%%), at offset %d; fetched=%d kept=%d published=%d expired=%d "
            "dead=%d (%.0f records/s)",
            self.cfg.id,
            self.label,
            done,
            len(self.batches),
            100.0 * done / max(len(self.batches), 1),
            batch.lo,
            self.counts.fetched,
            self.counts.kept,
            self.counts.published,
            self.counts.expired,
            self.counts.dead_lettered,
            rate,
        )


def load_transform(cfg: CrawlTaskConfig) -> Transform | None:
    if cfg.transform is None:
        return None
    try:
        return import_string(cfg.transform)
    except ImportError as exc:
        raise ConfigError(f"task {cfg.id}: transform '{cfg.transform}' cannot be imported: {exc}") from exc


def crawl_chunk(run: RunContext, payload: Mapping[str, Any]) -> dict[str, Any]:
    return ChunkCrawler(run, payload).crawl()
