"""Typed run data: the counts a batch, a chunk and a run add up, a dead letter, and the run summary.

Pure: no Airflow, no I/O. The names of the counters here are also the names of the crawl metrics, of the
``crawl_run`` columns and of the keys in a chunk's result and a run's summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, NamedTuple, cast

from crawler_ops.drift import FieldProfile
from crawler_ops.planning import Batch


@dataclass(frozen=True)
class RunCounts:
    """What a batch, a chunk or a run did; counts add up with ``+``."""

    pages: int = 0
    fetched: int = 0
    kept: int = 0
    published: int = 0
    expired: int = 0
    dead_lettered: int = 0
    batches_done: int = 0
    batches_skipped: int = 0

    def __add__(self, other: RunCounts) -> RunCounts:
        return RunCounts(*(a + b for a, b in zip(self.values(), other.values(), strict=True)))

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in COUNTER_NAMES)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RunCounts:
        """The counters found in ``values`` (a chunk result, a run record); missing ones are 0."""
        return cls(**{name: int(values.get(name) or 0) for name in COUNTER_NAMES})

    @classmethod
    def total(cls, many: Sequence[RunCounts]) -> RunCounts:
        return sum(many, cls())


COUNTER_NAMES = tuple(f.name for f in fields(RunCounts))
# What a run record's ``mode`` says: how its plan read the source. ``plan`` is a run whose plan failed before it
# knew; ``dry_run`` is never stored (a dry run records nothing), only summarised; ``import`` is a progress import.
RunMode = Literal["first", "incremental", "replay", "backfill", "dry_run", "plan", "import"]
# A run record is ``running`` from its plan until its commit (or the listener) closes it.
RunStatus = Literal["running", "success", "failed"]
# Counted in the run record (``crawl_run``) and shown in the status view's last run.
RECORD_COUNTERS = ("fetched", "kept", "published", "expired", "dead_lettered")
# Emitted as metrics, once per batch after it is recorded done.
METRIC_COUNTERS = (*RECORD_COUNTERS, "batches_done")


class DeadLetter(NamedTuple):
    """A record that cannot be published as it is: its source offset, why, and the record as the source sent it."""

    offset: int
    reason: str
    record: Any


@dataclass(frozen=True)
class BatchOutcome:
    """A finished batch: what it adds to its run, its dead letters, and the early-stop cutoff it found.

    :param cutoff: on a first crawl, offsets below this are older than the window (0: none found).
    :param skipped_as_expired: the batch lies below the cutoff and was not fetched.
    :param profile: the fields of its published records (a sample of them), for the run's drift report.
    """

    batch: Batch
    counts: RunCounts
    dead_letters: tuple[DeadLetter, ...] = ()
    cutoff: int = 0
    skipped_as_expired: bool = False
    profile: FieldProfile = field(default_factory=FieldProfile)


@dataclass(frozen=True)
class ChunkResult:
    """What one mapped ``crawl_chunk`` instance returns (as a dict through XCom)."""

    label: str
    counts: RunCounts
    elapsed_s: float
    deferrals: int = 0  # times it gave its worker slot back to wait for its source

    def to_dict(self) -> dict[str, Any]:
        elapsed_s = round(self.elapsed_s, 3)
        return {"label": self.label, **self.counts.to_dict(), "elapsed_s": elapsed_s, "deferrals": self.deferrals}


@dataclass(frozen=True)
class ChunkResume:
    """Where a deferrable chunk starts: at its batch ``index`` (plan order), after ``counts`` and ``elapsed_s`` of the
    legs before it; ``deferrals``: the legs before it; ``stalls``: the deferrals in a row that finished no batch.
    Travels through the deferral's trigger as JSON."""

    index: int = 0
    counts: RunCounts = field(default_factory=RunCounts)
    elapsed_s: float = 0.0
    deferrals: int = 0
    stalls: int = 0

    def to_kwargs(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "counts": self.counts.to_dict(),
            "elapsed_s": self.elapsed_s,
            "deferrals": self.deferrals,
            "stalls": self.stalls,
        }

    @classmethod
    def from_kwargs(cls, values: Mapping[str, Any]) -> ChunkResume:
        return cls(
            int(values["index"]),
            RunCounts.from_dict(values.get("counts") or {}),
            float(values.get("elapsed_s") or 0.0),
            int(values.get("deferrals") or 0),
            int(values.get("stalls") or 0),
        )


@dataclass(frozen=True)
class RunRecord:
    """A run's row in ``crawler_ops.crawl_run`` as the store reads it back.

    :param counts: what the run's finished batches added up to so far.
    :param committed_kept: of ``counts.kept``, what a commit of this run already added to the task's totals (a
        retried commit adds only what came since); ``committed_published`` likewise.
    :param window_count: a first crawl with ``source.window_filter``: the records the source counted in its window.
    :param profile: the fields of the records its finished batches published (sampled), for its drift report.
    """

    mode: RunMode
    status: RunStatus
    ref_time: datetime
    started_at: datetime
    total: int | None = None
    old_watermark: int | None = None
    new_watermark: int | None = None
    planned: int = 0
    counts: RunCounts = field(default_factory=RunCounts)
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    finished_at: datetime | None = None
    committed_kept: int = 0
    committed_published: int = 0
    window_count: int | None = None
    profile: FieldProfile = field(default_factory=FieldProfile)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        """The record of a ``select_run`` row (a dict by column name)."""
        return cls(
            mode=cast(RunMode, row["mode"]),
            status=cast(RunStatus, row["status"]),
            ref_time=row["ref_time"],
            started_at=row["started_at"],
            total=row.get("total"),
            old_watermark=row.get("old_watermark"),
            new_watermark=row.get("new_watermark"),
            planned=int(row.get("planned") or 0),
            counts=RunCounts.from_dict(row),
            errors=tuple(row.get("errors") or ()),
            notes=tuple(row.get("notes") or ()),
            finished_at=row.get("finished_at"),
            committed_kept=int(row.get("committed_kept") or 0),
            committed_published=int(row.get("committed_published") or 0),
            window_count=row.get("window_count"),
            profile=FieldProfile(int(row.get("drift_sampled") or 0), row.get("drift_profile") or {}),
        )

    @property
    def uncommitted_kept(self) -> int:
        """What the run kept since its last commit (all of it before the first)."""
        return self.counts.kept - self.committed_kept

    @property
    def uncommitted_published(self) -> int:
        return self.counts.published - self.committed_published


@dataclass(frozen=True)
class RunSummary:
    """The summary of a crawl run: returned by commit, logged, sent to the webhook, attached to the Asset event.

    :param unfinished: planned batches not done when the run ended; the run failed when there are any.
    :param notes: what an operator should know that is no error (a re-run of an older reference time).
    :param drift: the run's field drift (:meth:`crawler_ops.drift.Drift.to_json`); None when the run has none (a
        dry run, a run closed without its commit).
    """

    task: str
    run_id: str
    mode: RunMode | None
    status: RunStatus
    topic: str
    ref_time: str
    total: int | None = None
    planned: int = 0
    counts: RunCounts = field(default_factory=RunCounts)
    errors: tuple[str, ...] = ()
    old_watermark: int | None = None
    new_watermark: int | None = None
    duration_s: float | None = None
    unfinished: tuple[Batch, ...] = ()
    notes: tuple[str, ...] = ()
    drift: Mapping[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed" or bool(self.unfinished)

    def to_dict(self) -> dict[str, Any]:
        counts = self.counts
        return {
            "task": self.task,
            "run_id": self.run_id,
            "mode": self.mode,
            "status": self.status,
            "topic": self.topic,
            "ref_time": self.ref_time,
            "total": self.total,
            "planned": self.planned,
            "pages": counts.pages,
            **{name: getattr(counts, name) for name in RECORD_COUNTERS},
            "errors": list(self.errors),
            "notes": list(self.notes),
            "old_watermark": self.old_watermark,
            "new_watermark": self.new_watermark,
            "duration_s": self.duration_s,
            "unfinished_batches": len(self.unfinished),
            "oldest_unfinished": [[b.lo, b.hi] for b in sorted(self.unfinished)[:5]],
            "drift": None if self.drift is None else dict(self.drift),
        }
