"""Filtering a fetched page into the messages of its batch, within a crawl chunk; and a first crawl's early stop.

A page's records are kept when their date (``aae397``, else ``Collect_time``, as configured) falls in the run's
window, keyed and encoded (:func:`crawler_ops.message.records.build_messages`); records too large for Kafka and records
that are not valid become dead letters, sent to the dead-letter topic when one is configured. Nothing here produces.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow.sdk.module_loading import import_string

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.contract import decoded_records, evolve_codec, value_codec
from crawler_ops.crawl.run import RunContext
from crawler_ops.errors import ConfigError, SourceError
from crawler_ops.message.filtering import Window
from crawler_ops.message.records import Message, PageResult, Transform, build_messages, dead_letter_messages, too_large
from crawler_ops.planning import Batch
from crawler_ops.results import BatchOutcome, DeadLetter, RunCounts
from crawler_ops.transforms import bind_task_id

log = logging.getLogger(__name__)


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
    :param schema_id: the registry id of the value schema the plan settled (value_format json_schema or avro).
    """

    def __init__(self, run: RunContext, early_stop: bool, schema_id: int | None = None) -> None:
        self.cfg = run.cfg
        self.run_id = run.run_id
        self.window: Window = run.window.in_zone(self.cfg.filter.rule.tz)
        self.headers = [("crawl_task", self.cfg.id.encode()), ("run_id", run.run_id.encode())]
        self.shape = self.cfg.kafka.shape
        self.run_names = {"task": self.cfg.id, "run_id": run.run_id, "ref": run.ref.isoformat()}
        self.transform: Transform | None = load_transform(self.cfg)
        self.codec = value_codec(self.cfg, schema_id)
        self.dry_run = run.params.dry_run
        self.early_stop = early_stop
        self.empty_streak = 0

    def filter(self, batch: Batch, records: Sequence[Any], exact: bool = True) -> FilteredBatch:
        """Filter a fetched page into messages (nothing is produced yet); a short page is an error, unless not
        ``exact`` (a feed's page holds what the source sends)."""
        cfg = self.cfg
        if exact and len(records) != batch.size:
            raise SourceError(
                f"task {cfg.id}: page [{batch.lo}, {batch.hi}) returned {len(records)} records, "
                f"expected {batch.size} (short page or shrinking source); not marked done",
                retriable=True,
            )
        page = self.build(batch, records)
        if page.misfits:
            page = self.contract(batch, records, page)
        published, oversized = too_large(
            page.messages, records, batch.lo, cfg.kafka.max_message_bytes, with_headers=bool(self.shape.headers)
        )
        dead_letters = [*page.dead_letters, *oversized]
        messages: list[Message] = published
        dlq = cfg.kafka.dead_letter_topic
        if dlq is not None and dead_letters:
            dead = dead_letter_messages(dead_letters, dlq, cfg.id, self.run_id, self.shape, self.headers)
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

    def build(self, batch: Batch, records: Sequence[Any]) -> PageResult:
        try:
            return build_messages(
                records,
                batch.lo,
                self.cfg.filter.rule,
                self.window,
                self.shape,
                self.headers,
                self.transform,
                run=self.run_names,
                value=self.codec,
            )
        except ValueError as exc:
            raise SourceError(
                f"task {self.cfg.id}: {exc}; the source sent something that is not a record", retriable=False
            ) from exc

    def contract(self, batch: Batch, records: Sequence[Any], page: PageResult) -> PageResult:
        """Kept records the value schema does not accept: under contract freeze the batch fails (nothing of it is
        produced), under evolve a widened schema is registered and the page made again, under discard_row they
        stay dead letters."""
        cfg, unfit = self.cfg, page.misfits
        contract = cfg.kafka.value_contract
        if contract == "discard_row" or self.codec is None or (contract == "evolve" and self.dry_run):
            return page  # a dry run registers nothing: the records that would evolve the schema are counted as dead
        if contract == "freeze":
            first = unfit[0]
            raise SourceError(
                f"task {cfg.id}: {len(unfit)} record(s) of batch [{batch.lo}, {batch.hi}) do not fit the value schema; "
                f"the record at source offset {first.offset} {first.reason.removesuffix('; not published')}. "
                "Nothing of the batch was produced (contract freeze). Register a version that accepts it, or set "
                "kafka.contract to evolve or discard_row, then run again",
                retriable=False,
            )
        self.codec = evolve_codec(
            cfg, self.codec, decoded_records([records[m.offset - batch.lo] for m in unfit], self.transform)
        )
        return self.build(batch, records)

    def skipped_by_rule(self, batch: Batch, reason: str, envelope: Any) -> FilteredBatch:
        """A page a skip rule of ``source.responses`` matched (``reason`` names the rule, the task and the offsets):
        the batch is done without records, with one dead letter holding the answer's ``envelope``. It does not count
        towards a first crawl's early stop: its dates are unknown."""
        log.warning(
            "task %s: %s; batch [%d, %d) recorded done without its records", self.cfg.id, reason, batch.lo, batch.hi
        )
        dead = (DeadLetter(batch.lo, reason, envelope),)
        dlq = self.cfg.kafka.dead_letter_topic
        messages: list[Message] = []
        if dlq is not None:
            messages = dead_letter_messages(dead, dlq, self.cfg.id, self.run_id, self.shape, self.headers)
        return FilteredBatch(batch, messages, dead_letters=dead)

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


def load_transform(cfg: CrawlTaskConfig) -> Transform | None:
    if cfg.transform is None:
        return None
    try:
        transform = import_string(cfg.transform)
    except ImportError as exc:
        raise ConfigError(f"task {cfg.id}: transform '{cfg.transform}' cannot be imported: {exc}") from exc
    return bind_task_id(transform, cfg.id)
