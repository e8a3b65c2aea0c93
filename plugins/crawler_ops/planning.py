"""Pure planning: total + watermark + status rows -> batches (newest first) -> chunks for mapped tasks.

The source is an append-only sequence of records at offsets ``[0, total)``; higher offsets are newer.
Every offset below the watermark is done. A plan covers ``[watermark, total)`` minus the intervals the
status table already holds as done, every offset exactly once, newest first, so a failed run leaves the
newest data delivered and the oldest gap for the next run. Batches are made lazily, newest first, so a run
that takes the newest few of a huge range costs what it takes. No Airflow, no I/O: unit-tested in milliseconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Batch:
    """A half-open offset range ``[lo, hi)`` fetched as one page and marked done as one status row."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not 0 <= self.lo < self.hi:
            raise ValueError(f"a batch needs 0 <= lo < hi, got [{self.lo}, {self.hi})")

    @property
    def size(self) -> int:
        return self.hi - self.lo

    def __str__(self) -> str:
        return f"[{self.lo}, {self.hi})"


@dataclass(frozen=True)
class Chunk:
    """Contiguous batches (in plan order, newest first) handled by one mapped task instance."""

    batches: tuple[Batch, ...]

    @property
    def lo(self) -> int:
        return min(b.lo for b in self.batches)

    @property
    def hi(self) -> int:
        return max(b.hi for b in self.batches)

    @property
    def records(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def label(self) -> str:
        return f"offsets {self.lo}-{self.hi}"


@dataclass(frozen=True)
class ChunkPlan:
    """What the plan step hands one ``crawl_chunk`` instance: the chunk's label and batches (newest first), and
    whether this is a first crawl, where pages with nothing in the window end the crawl early; the value schema's id.

    Its XCom form (:meth:`to_xcom`, :meth:`from_xcom`) is a JSON-able dict:
    ``{"label": "offsets 0-200", "batches": [[100, 200], [0, 100]], "early_stop": false}``, with ``"schema_id"``: the
    registry id the chunk frames values with, when the task's value_format uses a Schema Registry.
    """

    label: str
    batches: tuple[Batch, ...]
    early_stop: bool = False
    schema_id: int | None = None

    @classmethod
    def of(cls, chunk: Chunk, early_stop: bool, schema_id: int | None = None) -> ChunkPlan:
        return cls(chunk.label, chunk.batches, early_stop, schema_id)

    def to_xcom(self) -> dict[str, Any]:
        value = {"label": self.label, "batches": [[b.lo, b.hi] for b in self.batches], "early_stop": self.early_stop}
        return value if self.schema_id is None else value | {"schema_id": self.schema_id}

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> ChunkPlan:
        schema_id = value.get("schema_id")
        return cls(
            label=str(value.get("label", "")),
            batches=tuple(Batch(int(lo), int(hi)) for lo, hi in value["batches"]),
            early_stop=bool(value.get("early_stop")),
            schema_id=None if schema_id is None else int(schema_id),
        )


def merge(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of half-open intervals as sorted, disjoint, non-touching intervals."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def fill_gaps(lo: int, hi: int, batch_size: int, taken: Iterable[Batch] = ()) -> list[Batch]:
    """New batches over ``[lo, hi)`` minus ``taken``, newest first (all of :func:`iter_gaps`)."""
    return list(iter_gaps(lo, hi, batch_size, taken))


def iter_gaps(lo: int, hi: int, batch_size: int, taken: Iterable[Batch] = (), aligned: bool = False) -> Iterator[Batch]:
    """New batches over ``[lo, hi)`` minus ``taken``, newest first, made one at a time.

    Each gap is cut from its top: ``[g_hi - b, g_hi)``, ``[g_hi - 2b, g_hi - b)``, ..., the last batch
    clipped at the gap's start, so the oldest partial batch is included. ``aligned``: cut at the multiples of
    ``b`` instead (the pages of a page paginator), so no batch straddles two pages; a gap's top and bottom
    batches may then be partial.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    gaps: list[tuple[int, int]] = []
    cursor = hi
    for t_lo, t_hi in reversed(merge((b.lo, b.hi) for b in taken)):
        if t_hi < cursor:
            gaps.append((max(t_hi, lo), cursor))
        cursor = min(cursor, t_lo)
        if cursor <= lo:
            break
    if cursor > lo:
        gaps.append((lo, cursor))
    if aligned:
        return (batch for g_lo, g_hi in gaps for batch in aligned_cuts(g_lo, g_hi, batch_size))
    return (Batch(max(g_lo, top - batch_size), top) for g_lo, g_hi in gaps for top in range(g_hi, g_lo, -batch_size))


def aligned_cuts(lo: int, hi: int, batch_size: int) -> Iterator[Batch]:
    """``[lo, hi)`` cut at the multiples of ``batch_size``, newest first."""
    top = hi
    while top > lo:
        bottom = max(lo, (top - 1) // batch_size * batch_size)
        yield Batch(bottom, top)
        top = bottom


def iter_plan(
    total: int,
    watermark: int,
    batch_size: int,
    done: Sequence[Batch] = (),
    pending: Sequence[Batch] = (),
    floor: int | None = None,
    aligned: bool = False,
) -> Iterator[Batch]:
    """Batches to crawl now, newest first, made one at a time.

    :param total: the source's current record count.
    :param watermark: every offset below it is done (0 on the first crawl).
    :param batch_size: records per page.
    :param done: intervals the status table holds as done (or expired) at or above the watermark.
    :param pending: intervals the status table holds as not done; they are planned again with their
        original boundaries, so status rows never overlap even when the total changed in between; one that
        reaches past a shrunken total ends at it (its row is clipped the same way), one above it waits.
    :param floor: no new batches below this offset (a first crawl's expiry floor); pending rows below it
        are still planned.
    :param aligned: new batches are cut at the multiples of ``batch_size`` (see :func:`iter_gaps`).
    """
    if total <= watermark:
        return iter(())
    start = watermark if floor is None else max(watermark, floor)
    in_range = [b if b.hi <= total else Batch(b.lo, total) for b in pending if watermark <= b.lo < total]
    in_range.sort(key=lambda b: b.lo, reverse=True)
    new = iter_gaps(start, total, batch_size, [*done, *in_range], aligned)
    # Both are newest first and disjoint: merging them keeps the plan newest first.
    return heapq.merge(new, in_range, key=lambda b: -b.lo)


def advance_watermark(watermark: int, finished: Iterable[Batch]) -> int:
    """The highest offset ``x`` such that ``[watermark, x)`` is covered by finished intervals."""
    for lo, hi in merge((b.lo, b.hi) for b in finished):
        if lo > watermark:
            break
        watermark = max(watermark, hi)
    return watermark


def chunk_batches(batches: Sequence[Batch], max_chunks: int, min_batches_per_chunk: int) -> list[Chunk]:
    """Group batches, in plan order, into at most ``max_chunks`` contiguous chunks of near-equal length.

    Each chunk gets at least ``min_batches_per_chunk`` batches when there are enough, so a mapped task
    instance does enough work to amortise Airflow's per-task cost.
    """
    if max_chunks < 1 or min_batches_per_chunk < 1:
        raise ValueError("max_chunks and min_batches_per_chunk must be >= 1")
    if not batches:
        return []
    count = min(max_chunks, max(1, len(batches) // min_batches_per_chunk))
    size, extra = divmod(len(batches), count)
    chunks: list[Chunk] = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        chunks.append(Chunk(tuple(batches[start:end])))
        start = end
    return chunks


def expiry_floor(boundary: int, batch_size: int, max_expired_batches: int) -> int:
    """Offset below which a first crawl treats records as expired, given the probed window boundary.

    The crawl still reads ``max_expired_batches`` batches' worth below the boundary, to absorb records that
    are only roughly in time order.
    """
    return max(0, boundary - max_expired_batches * batch_size)


def search_bracket(
    total: int, width: int, within: int, older: Callable[[list[int]], Sequence[bool]]
) -> tuple[int, int, int]:
    """Search ``[0, total)`` for the first offset not older than a moment, ``width`` offsets a round (``older``
    reads them), until it is known within fewer than ``within`` offsets: ``(lo, hi, rounds)``, the first offset not
    older being in ``[lo, hi]`` (``lo == hi`` with ``within`` 1). Records need only be roughly in time order."""
    lo, hi, rounds = 0, total, 0
    while hi - lo >= max(1, within):
        points = probe_points(lo, hi, width)
        lo, hi = narrow(lo, hi, points, older(points))
        rounds += 1
    return lo, hi, rounds


def probe_points(lo: int, hi: int, width: int) -> list[int]:
    """Offsets to read in one round of a search of ``[lo, hi)`` with ``width`` reads per round: evenly spaced,
    so the answer is left in one of ``width + 1`` parts; every offset when ``width`` or fewer remain."""
    if hi - lo <= width:
        return list(range(lo, hi))
    return sorted({lo + (hi - lo) * i // (width + 1) for i in range(1, width + 1)})


def narrow(lo: int, hi: int, points: Sequence[int], older: Sequence[bool]) -> tuple[int, int]:
    """The part of ``[lo, hi)`` left after reading ``points``: the first offset not older lies above the
    last point found older and at or below the first point found not older."""
    for index, (point, is_older) in enumerate(zip(points, older, strict=True)):
        if not is_older:
            return (points[index - 1] + 1 if index else lo), point
    return points[-1] + 1, hi
