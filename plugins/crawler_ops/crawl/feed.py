"""The crawl steps of a sequential feed (``cursor``, ``next_link``, ``link_header`` paginators): a newest-first feed
read page after page from its first page, each page naming the next, down to the newest record the last completed
crawl saw (the task's **mark**).

- **plan** (:func:`plan_feed`): under the task's lock, continue the open plan at its first page not done, or
  start one at the feed's first page (a page row without a position). One chunk, one batch: the chunk walks on.
- **chunk** (:class:`FeedWalk`): per page: fetch it, keep its records before the stop (:func:`stop_at`), publish
  them, wait for Kafka's confirmation, then in ONE transaction mark the page done and insert the next page's row
  with the position that fetches it (claimed by this worker). A kill re-publishes at most the page in flight; the
  run's retry, or the next run, resumes at the first page not done, from its stored position.
- **commit** (:func:`advance_feed`): only when every page of the plan is done does the task's mark become the
  newest record of the plan's first page, and the watermark the number of pages read by completed plans.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from crawler_ops.crawl.batch_filter import BatchFilter, FilteredBatch
from crawler_ops.crawl.contract import Settled
from crawler_ops.crawl.ledger import DryRunLedger, RunRecordLedger, StatusTableLedger
from crawler_ops.crawl.preflight import ensure_topics, settle_on
from crawler_ops.crawl.publishers import publisher_for
from crawler_ops.crawl.run import RunContext
from crawler_ops.drift import profile_values
from crawler_ops.errors import ConfigError, SourceError, StatusTableError
from crawler_ops.hooks.kafka.exactly_once import TransactionalPublisher
from crawler_ops.hooks.kafka.producer import Publisher
from crawler_ops.hooks.source.feed import FeedPage, feed_reader, feed_send, request_url
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.store.feed_rows import FeedRows, Mark, PageRow
from crawler_ops.hooks.store.hook import CrawlStoreHook, Cursor
from crawler_ops.hooks.store.status_table import DONE
from crawler_ops.message.filtering import DateRule, record_date
from crawler_ops.message.pages import record_head
from crawler_ops.planning import Batch, ChunkPlan
from crawler_ops.results import BatchOutcome, ChunkResult, RunCounts, RunRecord

log = logging.getLogger(__name__)


def plan_feed(run: RunContext) -> list[ChunkPlan]:
    """Plan a feed's run: the open plan's first page not done, or the feed's first page; one chunk."""
    cfg, params = run.cfg, run.params
    if params.replay or run.backfill_interval is not None:
        raise ConfigError(
            f"task {cfg.id}: a {cfg.source.paginator.type} feed has no offsets to replay or backfill; trigger a "
            'normal run, or {"reset": true} to read the whole window again'
        )
    if not params.dry_run:
        ensure_topics(run)
    store, rows = run.store(), FeedRows(cfg.id)
    try:
        with store.transaction() as cur:
            store.ensure_schema(cur)
        with store.transaction(lock=True) as cur:
            if params.reset and not params.dry_run:
                store.reset(cur)
            watermark = store.read_watermark(cur)
            pages = rows.pages(cur, watermark or 0)
            if pages and all(page.status == DONE for page in pages) and not params.dry_run:
                watermark = close_plan(store, cur, run, None, pages)  # done, but its commit never ran
                pages = []
            first = rows.mark(cur) is None
            open_page = next((page for page in pages if page.status != DONE), None)
            lo = open_page.lo if open_page is not None else watermark or 0
            if not params.dry_run:
                if open_page is None:
                    rows.insert(cur, lo, run.run_id, None)
                store.batches.release_finished_claims(cur)
                mode = "first" if first else "incremental"
                store.start_run(cur, run.run_id, mode, run.ref, total=None, watermark=watermark, planned=1)
    finally:
        store.close()
    resumed = "resumes the open plan at" if open_page is not None else "starts at the feed's first page,"
    log.info("task %s run %s: the feed walk %s page %d", cfg.id, run.run_id, resumed, lo)
    settled = settle_feed_schema(run)
    schema_id = settled.schema_id if settled is not None else None
    return [ChunkPlan(f"feed from page {lo}", (Batch(lo, lo + 1),), early_stop=first, schema_id=schema_id)]


def settle_feed_schema(run: RunContext) -> Settled | None:
    """The value schema of a registry format, settled on the feed's first page (its newest records)."""

    def first_page() -> Sequence[Any]:
        source = run.source()
        try:
            return get_feed(source, None).records
        finally:
            source.close()

    return settle_on(run, first_page)


def advance_feed(
    store: CrawlStoreHook,
    cur: Cursor,
    run: RunContext,
    record: RunRecord | None,
    planned: Sequence[Batch],
    old: int | None,
) -> tuple[int | None, list[Batch]]:
    """Commit a feed's run: when every page of the plan (from its ``planned`` first page) is done, save the plan's
    mark, count its pages into the watermark ``old`` and prune its rows; otherwise keep all (the next run resumes
    the plan). Returns the watermark and the pages left undone."""
    pages = FeedRows(run.cfg.id).pages(cur, old or 0)
    left = [Batch(page.lo, page.lo + 1) for page in pages if page.status != DONE]
    if left or not pages:
        store.batches.release_run(cur, run.run_id)
        return old, left
    return close_plan(store, cur, run, record, pages), []


def close_plan(
    store: CrawlStoreHook, cur: Cursor, run: RunContext, record: RunRecord | None, pages: Sequence[PageRow]
) -> int:
    """A plan whose pages are all done: its mark becomes the task's, the watermark passes its pages."""
    new = max(page.lo for page in pages) + 1
    store.save_progress(
        cur,
        run.run_id,
        new,
        new,
        ref=run.ref,
        last_start=pages[0].lo,
        status="completed",
        kept=record.uncommitted_kept if record else 0,
        published=record.uncommitted_published if record else 0,
    )
    FeedRows(run.cfg.id).save_mark(cur, pages[0].mark)
    store.batches.prune_below(cur, new)
    store.batches.release_run(cur, run.run_id)
    log.info("task %s: feed plan of pages [%d, %d) complete; mark %s", run.cfg.id, pages[0].lo, new, pages[0].mark)
    return new


def stop_at(
    page: FeedPage, fields: tuple[str, ...], key_field: str, rule: DateRule, mark: Mark | None, since: datetime
) -> tuple[int, bool]:
    """How many of a page's records (newest first) come before the stop, and whether the walk stops here.

    The walk stops at the mark's record (by key), at the first record older than the mark's date (the mark's
    record was deleted upstream), after a page whose dated records are all older than ``since`` (the window's
    start: a later page holds nothing the run keeps), and where the feed ends: a page naming no next page, or an
    empty page whatever it names (scroll-style APIs answer an empty page with a cursor again at their end).
    """
    dated_old = 0
    for index, record in enumerate(page.records):
        head = record_head(record, fields)
        date = record_date(head, rule.fields, rule.tz)[0]
        if mark is not None and (str(head.get(key_field)) == mark.key or (date and mark.date and date < mark.date)):
            return index, True
        dated_old += date is not None and date < since
    count = len(page.records)
    return count, page.next is None or count == 0 or dated_old == count


def newest(page: FeedPage, fields: tuple[str, ...], key_field: str, rule: DateRule) -> Mark | None:
    """The mark a plan's first page sets: its first record's key and date (None: an empty page or no key)."""
    if not page.records:
        return None
    head = record_head(page.records[0], fields)
    key = head.get(key_field)
    return None if key in (None, "") else Mark(str(key), record_date(head, rule.fields, rule.tz)[0])


class FeedLedger(StatusTableLedger):
    """The status-table ledger of a feed: finishing a page inserts and claims the next page's row with its
    position, and saves a plan's mark on its first page, in the transaction that marks the page done."""

    next_position: str | None = None
    plan_mark: Mark | None = None
    # A feed's page completes through its own steps (renew_in, complete_in below), in one transaction.
    finish = RunRecordLedger.finish

    @property
    def rows(self) -> FeedRows:
        return FeedRows(self.store.task_id)

    def resume(self, batch: Batch) -> tuple[Batch, str | None] | None:
        """Where the walk of the plan starting at ``batch`` goes on: its first page not done (a retry after a kill
        finds the pages before it done), and the position stored with it; None when every page is done."""
        with self.store.transaction() as cur:
            pages = self.rows.pages(cur, batch.lo)
        page = next((page for page in pages if page.status != DONE), None)
        return None if page is None else (Batch(page.lo, page.lo + 1), page.position)

    def renew_in(self, cur: Cursor, batch: Batch | None) -> bool:
        if batch is None:
            return True
        self.rows.insert(cur, batch.lo, self.run_id, self.next_position)
        return self.store.batches.claim(cur, batch, self.owner, self.token, self.lease_s)

    def complete_in(self, cur: Cursor, outcome: BatchOutcome) -> bool:
        mine = super().complete_in(cur, outcome)
        if mine and self.plan_mark is not None:
            self.rows.set_plan_mark(cur, outcome.batch.lo, self.plan_mark)
        return mine


class DryRunFeedLedger(DryRunLedger):
    """A dry run's feed ledger: it records nothing, so a walk starts at its planned page with no stored position."""

    next_position: str | None = None
    plan_mark: Mark | None = None

    def resume(self, batch: Batch) -> tuple[Batch, str | None] | None:
        return batch, None


def feed_ledger(run: RunContext, owner: str, token: str) -> FeedLedger | DryRunFeedLedger:
    """A dry run's ledger records nothing; any other run's pages are rows of the status table."""
    if run.params.dry_run:
        return DryRunFeedLedger()
    cfg = run.cfg
    return FeedLedger(run.store(), run.run_id, owner, token, cfg.claim_lease_s, cfg.max_attempts, run.store())


class FeedWalk:
    """One feed chunk: page after page from the planned one (see the module doc).

    :param mark: where the walk stops (the task's mark; None on a first crawl).
    """

    def __init__(
        self,
        run: RunContext,
        source: SourceApiHook,
        ledger: FeedLedger | DryRunFeedLedger,
        publisher: Publisher,
        mark: Mark | None,
        schema_id: int | None = None,
    ) -> None:
        self.run, self.cfg, self.source, self.ledger, self.publisher = run, run.cfg, source, ledger, publisher
        self.filter = BatchFilter(run, early_stop=False, schema_id=schema_id)
        self.mark, self.key_field = mark, str(run.cfg.kafka.unique_key_field)
        self.counts = RunCounts()
        self.current: Batch | None = None

    def walk(self, batch: Batch | None) -> None:
        """Fetch, filter, publish and record pages from ``batch`` on until the stop."""
        position = None
        if batch is not None:
            resumed = self.ledger.resume(batch)
            if resumed is None:
                log.info("task %s: every page of the feed plan from page %d is done", self.cfg.id, batch.lo)
                return
            batch, position = resumed
            if isinstance(self.publisher, TransactionalPublisher) and self.publisher.markers:
                self.publisher.markers.generations.update(self.ledger.generations([batch]))
        if batch is None or not self.ledger.claim(batch):
            raise StatusTableError(
                f"task {self.cfg.id}: feed page {batch} is done, parked or held by another worker; nothing read"
            )
        self.current = batch
        for _ in range(self.cfg.max_planned_batches):
            page = self.fetch(batch, position)
            keep, stop = stop_at(page, self.source.fields, self.key_field, self.cfg.filter.rule, self.mark, self.since)
            outcome = self.publish(batch, page.records[:keep])
            if not stop and page.next == position:  # a last page whose next link is itself: the feed's end
                log.info("task %s: feed page %d names itself as the next: the feed ends there", self.cfg.id, batch.lo)
                stop = True
            following = None if stop or page.next is None else Batch(batch.lo + 1, batch.lo + 2)
            self.finish(outcome, following, page, position)
            if following is None:
                return
            batch, position = following, page.next
            self.current = batch
        raise SourceError(
            f"task {self.cfg.id}: the feed walk read max_planned_batches ({self.cfg.max_planned_batches}) pages "
            "without reaching the mark, the window's start or the feed's end; raise max_planned_batches",
            retriable=False,
        )

    def publish(self, batch: Batch, records: Sequence[Any]) -> BatchOutcome:
        """Filter and publish a page's kept records and wait for Kafka; with exactly-once delivery, a page whose
        transaction an earlier attempt committed (its marker) is only recorded done, and its page was read again
        only for the position of the next."""
        prior = self.publisher.delivered(batch)
        if prior is not None:
            log.info("task %s: feed page %d was delivered by an earlier attempt; recorded done", self.cfg.id, batch.lo)
            return FilteredBatch(batch, prior=prior).outcome(published=0)
        filtered = self.filter.filter(batch, records, exact=False)
        self.publisher.send(batch, filtered.messages, filtered.outcome(published=filtered.kept).counts)
        published = self.publisher.confirm()
        values = (message.value for message in filtered.messages[: filtered.kept])  # dead letters follow them
        profile = profile_values(values, self.cfg.drift_sample)
        return replace(filtered.outcome(published=published), profile=profile)

    @property
    def since(self) -> datetime:
        return self.filter.window.start

    def fetch(self, batch: Batch, position: str | None) -> FeedPage:
        try:
            return get_feed(self.source, position)
        except SourceError as exc:
            if position is None or exc.retriable:
                raise
            raise SourceError(
                f"task {self.cfg.id}: the source refused feed page {batch.lo}'s stored position {position!r} ({exc}); "
                'the cursor or link may have expired: trigger the DAG with {"reset": true} to forget the open plan '
                "and the mark, and crawl the window again from the feed's first page",
                retriable=False,
            ) from exc

    def finish(self, outcome: BatchOutcome, following: Batch | None, page: FeedPage, position: str | None) -> None:
        """Record the page done and, in the same transaction, the next page's row with its position (and, on the
        plan's first page, the plan's mark)."""
        self.ledger.next_position = page.next
        first = position is None
        self.ledger.plan_mark = (
            newest(page, self.source.fields, self.key_field, self.cfg.filter.rule) if first else None
        )
        _, held = self.ledger.finish(outcome, following)
        if following is not None and isinstance(self.publisher, TransactionalPublisher) and self.publisher.markers:
            self.publisher.markers.generations[following.lo] = self.run.run_id  # the run that created its row
        self.counts += outcome.counts
        self.current = None
        if following is not None and not held:
            raise StatusTableError(f"task {self.cfg.id}: feed page {following.lo} is taken by another worker; stopping")


def crawl_feed(run: RunContext, payload: ChunkPlan) -> dict[str, Any]:
    """Crawl a feed's chunk (one planned page, the walk goes on from it); returns the chunk's result for XCom."""
    started = time.monotonic()
    owner = f"{run.run_id}|{run.map_index}"
    ledger = feed_ledger(run, owner, f"{owner}|{run.try_number}|{uuid.uuid4().hex[:12]}")
    batch = payload.batches[0] if payload.batches else None
    source = run.source()
    walk: FeedWalk | None = None
    try:
        # One transactional id for every attempt of every run of the feed (batch [0, 1) stands for it): each
        # fences the one before it, whose open transaction is aborted.
        publisher = publisher_for(run, [Batch(0, 1)], ledger, payload.schema_id)
        walk = FeedWalk(run, source, ledger, publisher, read_mark(run), payload.schema_id)
        try:
            walk.walk(batch)
        finally:
            publisher.close()
    except Exception as exc:
        log.error("task %s feed chunk failed: %s: %s", run.cfg.id, type(exc).__name__, exc)
        in_flight = walk.current if walk is not None else batch
        ledger.fail([in_flight] if in_flight is not None else [], f"{type(exc).__name__}: {exc}")
        raise
    finally:
        source.close()
        ledger.close()
    return ChunkResult(payload.label, walk.counts, time.monotonic() - started).to_dict()


def get_feed(source: SourceApiHook, position: str | None) -> FeedPage:
    """A page of the feed at ``position`` (None: its first page), through the hook's deadline, retries and limit."""
    base, label = str(source.client.base_url), f"task {source.task_label}"
    send = feed_send(source.paging, position, base, label)
    url = request_url(source.client, send)
    return source.get_json(send, "feed page", feed_reader(source.source, source.fields, base, label, url))


def read_mark(run: RunContext) -> Mark | None:
    store = run.store()
    try:
        with store.transaction() as cur:
            return FeedRows(run.cfg.id).mark(cur)
    finally:
        store.close()
