"""The three steps of a crawl run: plan, crawl one chunk, commit. Called by the generated DAG's tasks.

Where things happen, in one place:
- fetched: :meth:`SourceApiHook.get_page` (prefetched by a small thread pool in :func:`crawl_chunk`);
- filtered: :func:`crawler_ops.records.build_messages`;
- published: :meth:`BatchPublisher.publish`, which waits for every delivery report;
- checkpointed: :meth:`CrawlStoreHook.complete` (batch done) and :func:`commit_run` (watermark).
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
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from airflow.sdk.module_loading import import_string
from psycopg.types.json import Jsonb

from crawler_ops import metrics
from crawler_ops.config import CrawlTaskConfig
from crawler_ops.errors import ConfigError, CrawlerError, SourceError, StatusTableError
from crawler_ops.filtering import DateRule, Window, record_date
from crawler_ops.hooks.producer import BatchPublisher, IdempotentProducerHook, ensure_topic
from crawler_ops.hooks.source import SourceApiHook
from crawler_ops.hooks.store import BatchOutcome, CrawlStoreHook
from crawler_ops.planning import Batch, Chunk, advance_watermark, chunk_batches, expiry_floor, fill_gaps, plan_batches
from crawler_ops.records import Message, PageResult, Transform, build_messages, dead_letter_messages, record_head
from crawler_ops.sqlfiles import read_sql
from crawler_ops.status_table import DONE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunParams:
    """The validated trigger parameters of a crawl run (see the DAG's Params)."""

    reset: bool = False
    dry_run: bool = False
    max_batches: int | None = None
    filter_days: float | None = None
    replay_from: int | None = None
    replay_to: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any], task_label: str) -> RunParams:
        run = cls(
            reset=bool(params.get("reset")),
            dry_run=bool(params.get("dry_run")),
            max_batches=params.get("max_batches"),
            filter_days=params.get("filter_days"),
            replay_from=params.get("replay_from"),
            replay_to=params.get("replay_to"),
        )
        if (run.replay_from is None) != (run.replay_to is None):
            raise ConfigError(f"task {task_label}: give both replay_from and replay_to, or neither")
        if run.replay and not 0 <= run.replay_from < run.replay_to:  # type: ignore[operator]
            raise ConfigError(
                f"task {task_label}: replay range [{run.replay_from}, {run.replay_to}) is empty or "
                "negative; replay_from must be below replay_to"
            )
        if run.replay and run.reset:
            raise ConfigError(f"task {task_label}: reset and a replay range cannot be combined")
        return run

    @property
    def replay(self) -> bool:
        return self.replay_from is not None


@dataclass(frozen=True)
class RunContext:
    """Who is running: the task config, the Airflow run, the reference time, the params."""

    cfg: CrawlTaskConfig
    run_id: str
    ref: datetime
    params: RunParams
    map_index: int = -1
    try_number: int = 1
    backfill_interval: tuple[datetime, datetime] | None = None

    @property
    def window(self) -> Window:
        """Backfill runs keep the records dated in their own data interval; others the configured window."""
        if self.backfill_interval is not None:
            return Window(*self.backfill_interval)
        days = self.params.filter_days if self.params.filter_days is not None else self.cfg.filter.days
        return Window.around(self.ref, days, self.cfg.filter.tolerance)

    @property
    def uses_status_table(self) -> bool:
        """Replays and backfills read a range and never touch the watermark or the batch rows."""
        return not (self.params.dry_run or self.params.replay or self.backfill_interval is not None)

    def source(self) -> SourceApiHook:
        return SourceApiHook(self.cfg.source, self.cfg.id, self.cfg.source_task)

    def store(self) -> CrawlStoreHook:
        return CrawlStoreHook(self.cfg.postgres_conn_id, self.cfg.id)


# --------------------------------------------------------------------------- plan


def plan_run(run: RunContext) -> list[dict[str, Any]]:
    """Count, read the watermark and status rows, plan batches newest first, group them into chunks."""
    cfg, params = run.cfg, run.params
    source = run.source()
    try:
        total = source.get_total()
        if not params.dry_run:
            admin = IdempotentProducerHook(cfg.kafka.conn_id).admin()
            for topic in filter(None, (cfg.kafka.topic, cfg.kafka.dead_letter_topic)):
                ensure_topic(
                    admin, topic, cfg.kafka.partitions, cfg.kafka.replication_factor, cfg.kafka.create_topic, cfg.id
                )
        if params.replay or run.backfill_interval is not None:
            lo, hi = range_to_read(run, source, total)
            batches = fill_gaps(lo, hi, cfg.batch_size) if lo < hi else []
            mode, watermark, first = ("replay" if params.replay else "backfill"), None, False
            if not params.dry_run:
                store = run.store()
                store.ensure_schema()
                with store.transaction() as cur:
                    store.start_run(cur, run.run_id, mode, run.ref, total, None, len(batches))
        else:
            batches, mode, watermark, first = plan_from_store(run, source, total)
    finally:
        source.close()
    batches = batches[: params.max_batches] if params.max_batches else batches
    chunks = chunk_batches(batches, cfg.max_chunks, cfg.min_batches_per_chunk)
    log.info(
        "task %s run %s: %s plan, total=%d, watermark=%s, %d batches (%d records) in %d chunks%s",
        cfg.id,
        run.run_id,
        mode,
        total,
        watermark,
        len(batches),
        sum(b.size for b in batches),
        len(chunks),
        " [dry run]" if params.dry_run else "",
    )
    return [chunk_payload(chunk, first) for chunk in chunks]


def record_plan_failure(run: RunContext, exc: BaseException) -> None:
    """Keep a failed plan in the run history (status 'failed', the error) when PostgreSQL is reachable."""
    if run.params.dry_run:
        return
    store = run.store()
    try:
        store.ensure_schema()
        with store.transaction() as cur:
            store.start_run(cur, run.run_id, "replay" if run.params.replay else "plan", run.ref, None, None, 0)
            store.record_error(cur, run.run_id, f"plan: {type(exc).__name__}: {exc}", "plan", None)
            store.run_statement(
                cur,
                "finish_run",
                run_id=run.run_id,
                watermark=None,
                status="failed",
                errors=Jsonb([f"plan: {type(exc).__name__}: {exc}"]),
            )
            # finish_run sets the errors list whole; the error row above stays.
    except (CrawlerError, psycopg.Error):
        log.exception("task %s: could not record the failed plan in PostgreSQL", run.cfg.id)
    finally:
        store.close()


def plan_from_store(run: RunContext, source: SourceApiHook, total: int) -> tuple[list[Batch], str, int | None, bool]:
    """Plan a normal (first or incremental) run under the task's advisory lock; insert new batch rows."""
    cfg, params = run.cfg, run.params
    store = run.store()
    store.ensure_schema()
    with store.transaction(lock=True) as cur:
        if params.reset and not params.dry_run:
            store.reset(cur)
            log.info("task %s: reset requested; watermark and status rows forgotten", cfg.id)
        watermark = None if params.reset else store.read_watermark(cur)
        shrink_note = None
        if watermark is not None and total < watermark:
            watermark, shrink_note = handle_shrink(run, store, cur, total, watermark)
        first = watermark is None
        start = watermark or 0
        if not params.dry_run:
            store.run_statement(cur, "release_finished_claims")
        rows = store.read_rows(cur, above=start)
        done = [r.batch for r in rows if r.status == DONE]
        pending = [r.batch for r in rows if r.status != DONE]
        floor = start
        if first and total > 0:
            boundary = probe_window_start(source, total, run)
            floor = max(start, expiry_floor(boundary, cfg.batch_size, cfg.max_expired_batches))
        batches = plan_batches(total, start, cfg.batch_size, done, pending, floor=floor)
        if params.max_batches:
            batches = batches[: params.max_batches]
        if not params.dry_run:
            if floor > start:
                expired = fill_gaps(start, floor, floor - start, [*done, *pending])
                store.insert_batches(cur, expired, run.run_id, expired=True)
                log.info(
                    "task %s: first crawl; offsets below %d are older than the window (probed), recorded as expired",
                    cfg.id,
                    floor,
                )
            known = set(pending)
            store.insert_batches(cur, [b for b in batches if b not in known], run.run_id)
            store.start_run(
                cur, run.run_id, "first" if first else "incremental", run.ref, total, watermark, len(batches)
            )
            if shrink_note:
                store.run_statement(cur, "add_run_error", run_id=run.run_id, error=shrink_note)
    return batches, "first" if first else "incremental", watermark, first


def handle_shrink(
    run: RunContext, store: CrawlStoreHook, cur: Any, total: int, watermark: int
) -> tuple[int | None, str]:
    """The source reports fewer records than the watermark: warn (plan nothing), fail, or reset.

    :return: the watermark to plan from (None after a reset) and the note for the run summary.
    """
    cfg = run.cfg
    message = (
        f"task {cfg.id}: the source total shrank to {total}, below the watermark {watermark}; on_shrink={cfg.on_shrink}"
    )
    if cfg.on_shrink == "fail":
        raise SourceError(message + "; investigate the source, then trigger with reset=true", retriable=False)
    if cfg.on_shrink == "reset" and not run.params.dry_run:
        log.warning("%s: resetting", message)
        store.reset(cur)
        return None, message + ": watermark and status rows reset"
    log.warning("%s: nothing planned, watermark kept", message)
    return watermark, message + ": nothing planned, watermark kept"


def probe_offset(source: SourceApiHook, total: int, rule: DateRule, moment: datetime) -> int:
    """Binary search for the first offset whose record is not older than ``moment`` (records roughly in
    time order): O(log total) one-record requests. A record without a usable date counts as not older."""
    tz = rule.tz
    lo, hi = 0, total
    while lo < hi:
        mid = (lo + hi) // 2
        page = source.get_page(mid, 1)
        found = record_date(record_head(page[0], rule.fields), rule.fields, tz)[0] if page else None
        if found is not None and found < moment:
            lo = mid + 1
        else:
            hi = mid
    return lo


def probe_window_start(source: SourceApiHook, total: int, run: RunContext) -> int:
    """Where a first crawl's window starts: offsets below are older than the window."""
    offset = probe_offset(source, total, run.cfg.filter.rule, run.window.start)
    log.info("task %s: probed the window start at offset %d of %d", run.cfg.id, offset, total)
    return offset


def range_to_read(run: RunContext, source: SourceApiHook, total: int) -> tuple[int, int]:
    """The offsets a replay names, or those a backfill finds by probing its interval's two ends (one batch of
    margin each side for records that are only roughly in time order)."""
    if run.params.replay:
        return run.params.replay_from or 0, min(run.params.replay_to or 0, total)
    window, margin = run.window, run.cfg.batch_size
    lo = probe_offset(source, total, run.cfg.filter.rule, window.start)
    hi = probe_offset(source, total, run.cfg.filter.rule, window.end + timedelta(seconds=1))
    log.info(
        "task %s: backfill of [%s, %s] reads offsets [%d, %d) of %d (probed, +/- %d)",
        run.cfg.id,
        window.start,
        window.end,
        max(0, lo - margin),
        min(total, hi + margin),
        total,
        margin,
    )
    return max(0, lo - margin), min(total, hi + margin)


def chunk_payload(chunk: Chunk, early_stop: bool) -> dict[str, Any]:
    return {"label": chunk.label, "batches": [[b.lo, b.hi] for b in chunk.batches], "early_stop": early_stop}


# --------------------------------------------------------------------------- crawl one chunk


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


# --------------------------------------------------------------------------- commit


def commit_run(run: RunContext, chunks: Sequence[Mapping[str, Any]], results: Sequence[Any]) -> dict[str, Any]:
    """Move the watermark up to the oldest batch not done, tidy the status table, store the run summary.

    Runs after every chunk finished or failed. Returns the summary; the caller fails the DAG run when
    batches of this plan are left undone.
    """
    params = run.params
    planned = [Batch(lo, hi) for chunk in chunks for lo, hi in chunk["batches"]]
    if params.dry_run:
        summary = sum_results(results)
        summary.update(mode="dry_run", planned=len(planned), unfinished=len(chunks) - len(results))
        return summary
    store = run.store()
    with store.transaction(lock=True) as cur:
        record = store.read_run(cur, run.run_id) or {}
        old = store.read_watermark(cur)
        new = old
        unfinished: list[Batch] = []
        if run.uses_status_table:
            done = store.done_batches(cur, above=0)
            new = advance_watermark(old or 0, done)
            # Rows below the watermark were pruned by an earlier commit: the watermark says they are done.
            done_set = set(done)
            unfinished = [b for b in planned if b.hi > new and b not in done_set]
            total = record.get("total") or 0
            # A retried commit of a run already committed must not add its counts to the totals again.
            first_commit = record.get("status") == "running"
            store.run_statement(
                cur,
                "save_progress",
                watermark=new,
                total=total,
                last_start=max((b.lo for b in planned), default=None),
                status="completed" if not unfinished else "incomplete",
                kept=record.get("kept", 0) if first_commit else 0,
                published=record.get("published", 0) if first_commit else 0,
                run_id=run.run_id,
            )
            store.run_statement(cur, "prune_batches", watermark=new)
            store.release_run(cur, run.run_id)
        elif len(results) < len(chunks):
            unfinished = planned
        status = "success" if not unfinished else "failed"
        errors = list(record.get("errors") or [])
        store.run_statement(cur, "finish_run", run_id=run.run_id, watermark=new, status=status, errors=Jsonb(errors))
    return run_summary(run, record, status, len(planned), old, new, errors, unfinished)


def run_summary(
    run: RunContext,
    record: Mapping[str, Any],
    status: str,
    planned: int,
    old: int | None,
    new: int | None,
    errors: Sequence[str],
    unfinished: Sequence[Batch] = (),
) -> dict[str, Any]:
    """The run summary: returned by commit, logged, sent to the webhook, attached to the topic's Asset event."""
    started = record.get("started_at")
    return {
        "task": run.cfg.id,
        "run_id": run.run_id,
        "mode": record.get("mode"),
        "status": status,
        "topic": run.cfg.kafka.topic,
        "ref_time": run.ref.isoformat(),
        "total": record.get("total"),
        "planned": planned,
        "pages": record.get("pages", 0),
        "fetched": record.get("fetched", 0),
        "kept": record.get("kept", 0),
        "published": record.get("published", 0),
        "expired": record.get("expired", 0),
        "dead_lettered": record.get("dead_lettered", 0),
        "errors": list(errors),
        "old_watermark": old,
        "new_watermark": new,
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 3) if started else None,
        "unfinished_batches": len(unfinished),
        "oldest_unfinished": [[b.lo, b.hi] for b in sorted(unfinished)[:5]],
    }


def close_abandoned_run(cfg: CrawlTaskConfig, run_id: str, reason: str) -> dict[str, Any] | None:
    """A DAG run failed without its commit finishing the record: mark the record failed, give its claims back.

    :return: the run summary when this closed the record; None when the commit had already finished it (or
        there is no record), so the caller notifies only runs nobody reported.
    """
    store = CrawlStoreHook(cfg.postgres_conn_id, cfg.id)
    try:
        with store.transaction(lock=True) as cur:
            if (
                cur.execute(read_sql("cancel_run"), {"task": cfg.id, "run_id": run_id, "error": reason}).fetchone()
                is None
            ):
                return None
            released = store.release_run(cur, run_id)
            record = store.read_run(cur, run_id) or {}
            old = store.read_watermark(cur)
    finally:
        store.close()
    log.warning("task %s run %s ended without a commit (%s); %d claims released", cfg.id, run_id, reason, released)
    run = RunContext(cfg=cfg, run_id=run_id, ref=record.get("ref_time") or datetime.now(UTC), params=RunParams())
    return run_summary(run, record, "failed", record.get("planned", 0), old, old, record.get("errors") or [])


def failed_plan_summary(run: RunContext) -> dict[str, Any]:
    """The summary of a run whose plan failed, from its run record when the plan could write one."""
    record: Mapping[str, Any] = {}
    if not run.params.dry_run:
        store = run.store()
        try:
            with store.transaction() as cur:
                record = store.read_run(cur, run.run_id) or {}
        except (CrawlerError, psycopg.Error):
            log.exception("task %s: could not read the run record of the failed plan", run.cfg.id)
        finally:
            store.close()
    errors = list(record.get("errors") or []) or ["the plan task failed before it could record the run; see its log"]
    old = record.get("old_watermark")
    return run_summary(run, record, "failed", record.get("planned", 0), old, old, errors)


def sum_results(results: Sequence[Any]) -> dict[str, Any]:
    keys = ("pages", "fetched", "kept", "published", "expired", "dead_lettered", "batches_done")
    return {key: sum(int(r.get(key, 0)) for r in results if isinstance(r, Mapping)) for key in keys}
