"""Unit tests of crawler_ops.planning: batches newest first, every offset exactly once, chunks for mapping."""

from __future__ import annotations

import bisect
import itertools
import json
import tracemalloc

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.planning import (
    Batch,
    Chunk,
    ChunkPlan,
    advance_watermark,
    chunk_batches,
    expiry_floor,
    fill_gaps,
    iter_gaps,
    iter_plan,
    merge,
)
from tests.waiting import python_calls

# Keeps each hypothesis example cheap: batch sizes below span / MAX_NEW_BATCHES are only drawn for
# smaller spans, so a plan never has more than a few thousand batches to check.
MAX_NEW_BATCHES = 2_000
PROPERTY = settings(max_examples=150, deadline=None)

Interval = tuple[int, int]


def _covered_exactly_once(intervals: list[Interval], lo: int, hi: int) -> bool:
    """True when the intervals tile ``[lo, hi)``: sorted, each starting where the previous one ended."""
    if lo >= hi:
        return not intervals
    ordered = sorted(intervals)
    if ordered[0][0] != lo or ordered[-1][1] != hi:
        return False
    return all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(ordered))


def _pairwise_disjoint(intervals: list[Interval]) -> bool:
    ordered = sorted(intervals)
    return all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(ordered))


def _gaps(lo: int, hi: int, taken: list[Interval]) -> list[Interval]:
    """``[lo, hi)`` minus the (disjoint) taken intervals, ascending."""
    gaps: list[Interval] = []
    cursor = lo
    for t_lo, t_hi in sorted(taken):
        if t_lo > cursor:
            gaps.append((cursor, min(t_lo, hi)))
        cursor = max(cursor, t_hi)
        if cursor >= hi:
            break
    if cursor < hi:
        gaps.append((cursor, hi))
    return [(g_lo, g_hi) for g_lo, g_hi in gaps if g_lo < g_hi]


@st.composite
def status_rows(draw: st.DrawFn, lo: int, hi: int) -> tuple[list[Batch], list[Batch]]:
    """Done and pending intervals inside ``[lo, hi)``: non-overlapping, sometimes touching each other."""
    if hi <= lo:
        return [], []
    points = sorted(set(draw(st.lists(st.integers(lo, hi), max_size=14))))
    done: list[Batch] = []
    pending: list[Batch] = []
    for a, b in itertools.pairwise(points):
        kind = draw(st.sampled_from(("gap", "done", "pending")))
        if kind == "done":
            done.append(Batch(a, b))
        elif kind == "pending":
            pending.append(Batch(a, b))
    return done, pending


@st.composite
def plan_inputs(draw: st.DrawFn) -> tuple[int, int, int, list[Batch], list[Batch]]:
    total = draw(st.integers(0, 10**6))
    watermark = draw(st.one_of(st.integers(0, total), st.integers(total + 1, total + 10**6)))
    span = max(total - watermark, 0)
    batch_size = draw(st.integers(max(1, -(-span // MAX_NEW_BATCHES)), 10_000))
    done, pending = draw(status_rows(watermark, total))
    return total, watermark, batch_size, done, pending


def _check_new_batches_are_cut_from_the_top_of_each_gap(
    new: list[Batch], start: int, total: int, batch_size: int, taken: list[Batch]
) -> None:
    gaps = _gaps(start, total, [(b.lo, b.hi) for b in taken])
    gap_starts = [g_lo for g_lo, _ in gaps]
    tops = {g_hi for _, g_hi in gaps}
    his = {b.hi for b in new}
    assert tops <= his, "every gap's newest batch must end at the gap's top"
    for batch in new:
        assert batch.size <= batch_size
        g_lo, g_hi = gaps[bisect.bisect_right(gap_starts, batch.lo) - 1]
        assert g_lo <= batch.lo < batch.hi <= g_hi, f"{batch} leaves its gap [{g_lo}, {g_hi})"
        # Only the oldest batch of a gap may be partial, and then it ends at the gap's start.
        assert batch.size == batch_size or batch.lo == g_lo, f"{batch} is partial but not the oldest of its gap"


# --- Batch, Chunk, merge ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(5, 5), (6, 5), (-1, 3)],
    ids=["empty", "inverted", "negative-start"],
)
def test_batch_rejects_ranges_that_are_not_a_non_empty_slice_of_the_source(lo: int, hi: int) -> None:
    with pytest.raises(ValueError, match=r"0 <= lo < hi"):
        Batch(lo, hi)


def test_batch_size_is_the_length_of_its_half_open_range() -> None:
    assert Batch(0, 1).size == 1
    assert Batch(950, 1050).size == 100


def test_chunk_reports_its_offsets_and_record_count() -> None:
    chunk = Chunk((Batch(200, 300), Batch(100, 200), Batch(50, 100)))
    assert (chunk.lo, chunk.hi, chunk.records) == (50, 300, 250)
    assert chunk.label == "offsets 50-300"


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], []),
        ([(5, 10), (0, 3)], [(0, 3), (5, 10)]),
        ([(0, 5), (5, 10)], [(0, 10)]),
        ([(0, 6), (4, 10), (2, 3)], [(0, 10)]),
        ([(10, 20), (0, 30)], [(0, 30)]),
    ],
    ids=["empty", "disjoint-unsorted", "touching", "overlapping", "nested"],
)
def test_merge_returns_sorted_disjoint_non_touching_intervals(
    intervals: list[Interval], expected: list[Interval]
) -> None:
    assert merge(intervals) == expected


# --- iter_plan and fill_gaps: examples ---------------------------------------------------------------


def test_first_crawl_covers_the_oldest_partial_batch() -> None:
    plan = list(iter_plan(total=1050, watermark=0, batch_size=100))
    assert plan[0] == Batch(950, 1050)
    assert plan[-1] == Batch(0, 50)
    assert len(plan) == 11


def test_incremental_run_does_not_recrawl_the_page_at_the_watermark() -> None:
    plan = list(iter_plan(total=1250, watermark=1000, batch_size=100))
    assert plan == [Batch(1150, 1250), Batch(1050, 1150), Batch(1000, 1050)]


@pytest.mark.parametrize(
    ("total", "watermark"),
    [(1000, 1000), (900, 1000), (0, 0)],
    ids=["nothing-new", "source-shrank", "empty-source"],
)
def test_nothing_is_planned_when_the_source_has_nothing_above_the_watermark(total: int, watermark: int) -> None:
    assert list(iter_plan(total=total, watermark=watermark, batch_size=100)) == []


def test_done_batches_are_not_planned_again_and_the_gaps_around_them_are() -> None:
    done = [Batch(900, 1000), Batch(500, 600)]
    plan = list(iter_plan(total=1000, watermark=400, batch_size=100, done=done))
    assert plan == [Batch(800, 900), Batch(700, 800), Batch(600, 700), Batch(400, 500)]


def test_pending_rows_keep_their_boundaries_after_the_total_grew() -> None:
    # Planned earlier with total=1000 and batch 100; [900, 1000) failed, the source has grown since.
    pending = [Batch(900, 1000)]
    done = [Batch(v, v + 100) for v in range(0, 900, 100)]
    plan = list(iter_plan(total=1234, watermark=0, batch_size=100, done=done, pending=pending))
    assert plan == [Batch(1134, 1234), Batch(1034, 1134), Batch(1000, 1034), Batch(900, 1000)]


def test_pending_rows_at_or_above_a_shrunken_total_are_not_planned() -> None:
    plan = list(iter_plan(total=1000, watermark=800, batch_size=100, pending=[Batch(1000, 1100), Batch(800, 900)]))
    assert plan == [Batch(900, 1000), Batch(800, 900)]


def test_a_pending_row_straddling_a_shrunken_total_is_planned_up_to_the_total() -> None:
    plan = list(iter_plan(total=950, watermark=800, batch_size=100, pending=[Batch(900, 1000)]))
    assert plan == [Batch(900, 950), Batch(800, 900)]


@PROPERTY
@given(plan_inputs(), st.integers(0, 10**6))
def test_after_the_source_shrinks_the_plan_still_covers_every_offset_once_and_stops_at_the_total(
    case: tuple[int, int, int, list[Batch], list[Batch]], lost: int
) -> None:
    old_total, watermark, batch_size, done, pending = case
    total = max(watermark, old_total - lost)  # shrank, not below the watermark (that is on_shrink's business)
    plan = list(iter_plan(total, watermark, batch_size, done=done, pending=pending))

    assert all(b.hi <= total for b in plan), "no batch reaches past the total: its page would be short"
    done_below = [(b.lo, min(b.hi, total)) for b in done if b.lo < total]
    assert _covered_exactly_once([*((b.lo, b.hi) for b in plan), *done_below], watermark, total)
    assert {b.lo for b in pending if b.lo < total} <= {b.lo for b in plan}, "pending rows keep their start"


def test_floor_stops_new_batches_but_keeps_pending_rows_below_it() -> None:
    plan = list(iter_plan(total=1000, watermark=0, batch_size=100, pending=[Batch(100, 200)], floor=750))
    assert plan == [Batch(900, 1000), Batch(800, 900), Batch(750, 800), Batch(100, 200)]


def test_floor_below_the_watermark_changes_nothing() -> None:
    assert list(iter_plan(1000, 500, 100, floor=200)) == list(iter_plan(1000, 500, 100))


def test_fill_gaps_cuts_each_gap_from_its_top() -> None:
    batches = fill_gaps(0, 1000, 300, taken=[Batch(400, 500)])
    assert batches == [Batch(700, 1000), Batch(500, 700), Batch(100, 400), Batch(0, 100)]


@pytest.mark.parametrize("batch_size", [0, -5], ids=["zero", "negative"])
def test_a_batch_size_below_one_is_rejected(batch_size: int) -> None:
    with pytest.raises(ValueError, match=r"batch_size must be >= 1"):
        list(iter_plan(total=100, watermark=0, batch_size=batch_size))


# --- iter_plan: properties ---------------------------------------------------------------------------


@PROPERTY
@given(plan_inputs())
@example((1050, 0, 100, [], []))
@example((1, 0, 10_000, [], []))
@example((10**6, 0, 10_000, [], []))
@example((1000, 0, 1, [Batch(0, 999)], [Batch(999, 1000)]))
def test_plan_and_done_rows_cover_every_offset_above_the_watermark_exactly_once(
    case: tuple[int, int, int, list[Batch], list[Batch]],
) -> None:
    total, watermark, batch_size, done, pending = case
    plan = list(iter_plan(total, watermark, batch_size, done=done, pending=pending))

    if watermark >= total:
        assert plan == []
        return
    assert all(b.lo >= watermark for b in plan), "nothing below the watermark is planned"
    assert _covered_exactly_once([(b.lo, b.hi) for b in [*plan, *done]], watermark, total)
    los = [b.lo for b in plan]
    assert los == sorted(los, reverse=True), "batches are planned newest first"
    assert set(pending) <= set(plan), "pending rows are planned again with their exact boundaries"
    new = [b for b in plan if b not in set(pending)]
    _check_new_batches_are_cut_from_the_top_of_each_gap(new, watermark, total, batch_size, [*done, *pending])


@PROPERTY
@given(plan_inputs())
@example((1050, 0, 100, [], []))
@example((2300, 2050, 100, [], []))
def test_an_aligned_plan_covers_every_offset_once_and_no_new_batch_straddles_a_page(
    case: tuple[int, int, int, list[Batch], list[Batch]],
) -> None:
    total, watermark, batch_size, done, pending = case
    plan = list(iter_plan(total, watermark, batch_size, done=done, pending=pending, aligned=True))

    if watermark >= total:
        assert plan == []
        return
    assert _covered_exactly_once([(b.lo, b.hi) for b in [*plan, *done]], watermark, total)
    los = [b.lo for b in plan]
    assert los == sorted(los, reverse=True), "batches are planned newest first"
    assert set(pending) <= set(plan), "pending rows are planned again with their exact boundaries"
    for batch in set(plan) - set(pending):
        assert batch.lo // batch_size == (batch.hi - 1) // batch_size, f"{batch} straddles a page of {batch_size}"


@PROPERTY
@given(plan_inputs(), st.integers(0, 1_100_000))
def test_floor_limits_new_batches_while_pending_rows_below_it_are_still_planned(
    case: tuple[int, int, int, list[Batch], list[Batch]], floor: int
) -> None:
    total, watermark, batch_size, done, pending = case
    plan = list(iter_plan(total, watermark, batch_size, done=done, pending=pending, floor=floor))

    if watermark >= total:
        assert plan == []
        return
    start = max(watermark, floor)
    new = [b for b in plan if b not in set(pending)]
    assert all(b.lo >= start for b in new), "no new batch starts below the floor"
    assert set(pending) <= set(plan)
    intervals = [(b.lo, b.hi) for b in [*plan, *done]]
    assert _pairwise_disjoint(intervals), "no offset is planned twice or planned while done"
    above = [(max(lo, start), hi) for lo, hi in intervals if hi > start]
    assert _covered_exactly_once(above, start, total) if start < total else not new
    _check_new_batches_are_cut_from_the_top_of_each_gap(new, start, total, batch_size, [*done, *pending])


def _eager_plan(
    total: int, watermark: int, batch_size: int, done: list[Batch], pending: list[Batch], floor: int | None
) -> list[Batch]:
    """Every batch of the plan made at once and sorted newest first: what the lazy plan must yield, in order."""
    if total <= watermark:
        return []
    start = watermark if floor is None else max(watermark, floor)
    in_range = [b if b.hi <= total else Batch(b.lo, total) for b in pending if watermark <= b.lo < total]
    new = fill_gaps(start, total, batch_size, [*done, *in_range])
    return sorted([*new, *in_range], key=lambda b: b.lo, reverse=True)


@PROPERTY
@given(plan_inputs(), st.one_of(st.none(), st.integers(0, 1_100_000)), st.integers(0, 50))
def test_the_lazy_plan_yields_the_newest_batches_first_in_the_order_of_the_whole_plan(
    case: tuple[int, int, int, list[Batch], list[Batch]], floor: int | None, taken: int
) -> None:
    total, watermark, batch_size, done, pending = case
    whole = _eager_plan(total, watermark, batch_size, done, pending, floor)

    assert list(itertools.islice(iter_plan(total, watermark, batch_size, done, pending, floor), taken)) == whole[:taken]
    assert list(iter_plan(total, watermark, batch_size, done, pending, floor)) == whole


@PROPERTY
@given(st.integers(0, 10**15), st.integers(0, 10**15), st.integers(1, 10_000), st.integers(0, 20))
def test_the_newest_batches_of_any_range_cost_what_is_taken_not_the_range(
    lo: int, span: int, batch_size: int, taken: int
) -> None:
    hi = lo + span
    batches = list(itertools.islice(iter_gaps(lo, hi, batch_size), taken))

    assert len(batches) == min(taken, -(-span // batch_size))
    assert all(b.hi == hi - i * batch_size and b.lo == max(lo, b.hi - batch_size) for i, b in enumerate(batches))


def test_the_newest_batch_of_a_total_of_ten_to_the_twelve_plans_in_bounded_memory_and_time() -> None:
    done, pending = [Batch(10**12 - 500, 10**12 - 300)], [Batch(10**12 - 300, 10**12 - 250)]
    tracemalloc.start()
    newest, calls = python_calls(lambda: list(itertools.islice(iter_plan(10**12, 0, 100, done, pending), 3)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert newest == [Batch(10**12 - 100, 10**12), Batch(10**12 - 200, 10**12 - 100), Batch(10**12 - 250, 10**12 - 200)]
    assert peak < 64 * 1024, f"{peak} bytes for three batches of 10^10"
    assert calls < 200, f"{calls} Python calls for three batches of 10^10"


# --- advance_watermark -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finished", "expected"),
    [
        ([], 1000),
        ([Batch(1000, 1100), Batch(1100, 1200)], 1200),
        ([Batch(1100, 1200), Batch(1000, 1100)], 1200),
        ([Batch(1000, 1100), Batch(1200, 1300)], 1100),
        ([Batch(1100, 1200)], 1000),
        ([Batch(800, 900)], 1000),
        ([Batch(950, 1050)], 1050),
    ],
    ids=[
        "nothing-finished",
        "contiguous",
        "contiguous-unsorted",
        "stops-at-first-gap",
        "failed-oldest-batch-holds-it",
        "never-backwards",
        "straddling-the-watermark",
    ],
)
def test_watermark_moves_only_across_contiguous_finished_batches(finished: list[Batch], expected: int) -> None:
    assert advance_watermark(1000, finished) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 400),
    st.lists(st.tuples(st.integers(0, 500), st.integers(1, 60)).map(lambda t: Batch(t[0], t[0] + t[1])), max_size=20),
)
def test_watermark_advances_to_the_end_of_the_finished_run_starting_at_it(
    watermark: int, finished: list[Batch]
) -> None:
    covered = {offset for b in finished for offset in range(b.lo, b.hi)}
    expected = watermark
    while expected in covered:
        expected += 1
    assert advance_watermark(watermark, finished) == expected


# --- chunk_batches ------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3_000), st.integers(1, 600), st.integers(1, 100))
def test_chunks_hold_every_batch_once_in_plan_order_with_near_equal_sizes(
    count: int, max_chunks: int, min_batches: int
) -> None:
    batches = [Batch(i, i + 1) for i in reversed(range(count))]
    chunks = chunk_batches(batches, max_chunks=max_chunks, min_batches_per_chunk=min_batches)

    assert [b for c in chunks for b in c.batches] == batches
    if not batches:
        assert chunks == []
        return
    sizes = [len(c.batches) for c in chunks]
    assert 1 <= len(chunks) <= max_chunks
    assert min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1
    if count >= min_batches:
        assert min(sizes) >= min_batches
    # As many chunks as the limits allow: one more would exceed max_chunks or starve a chunk.
    assert len(chunks) == max_chunks or count < (len(chunks) + 1) * min_batches


@pytest.mark.parametrize(
    "max_chunks", [CrawlTaskConfig.model_fields["max_chunks"].default, 512], ids=["default", "max"]
)
def test_a_million_records_map_to_far_fewer_instances_than_max_map_length(max_chunks: int) -> None:
    min_batches = CrawlTaskConfig.model_fields["min_batches_per_chunk"].default
    plan = list(iter_plan(total=10**6, watermark=0, batch_size=100))
    chunks = chunk_batches(plan, max_chunks=max_chunks, min_batches_per_chunk=min_batches)

    assert len(plan) == 10_000
    assert len(chunks) <= max_chunks
    assert len(chunks) * 2 <= 1024, "far below [core] max_map_length"
    assert all(len(c.batches) >= min_batches for c in chunks)
    assert [c.hi for c in chunks] == sorted((c.hi for c in chunks), reverse=True)
    assert all(a.lo == b.hi for a, b in itertools.pairwise(chunks)), "chunks are contiguous"


def test_few_batches_make_a_single_chunk() -> None:
    batches = list(iter_plan(total=500, watermark=0, batch_size=100))
    assert chunk_batches(batches, max_chunks=16, min_batches_per_chunk=20) == [Chunk(tuple(batches))]


@pytest.mark.parametrize(
    ("max_chunks", "min_batches"),
    [(0, 1), (1, 0)],
    ids=["no-chunks", "no-batches-per-chunk"],
)
def test_chunk_limits_below_one_are_rejected(max_chunks: int, min_batches: int) -> None:
    with pytest.raises(ValueError, match=r"^max_chunks and min_batches_per_chunk must be >= 1$"):
        chunk_batches([Batch(0, 1)], max_chunks=max_chunks, min_batches_per_chunk=min_batches)


# --- expiry_floor ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("boundary", "batch_size", "max_expired", "expected"),
    [(10_000, 100, 5, 9_500), (300, 100, 5, 0), (0, 100, 5, 0), (1_000, 1, 1, 999)],
    ids=["reads-some-batches-below-the-boundary", "clamped-at-zero", "boundary-at-zero", "one-record-batches"],
)
def test_expiry_floor_leaves_max_expired_batches_below_the_boundary(
    boundary: int, batch_size: int, max_expired: int, expected: int
) -> None:
    assert expiry_floor(boundary, batch_size, max_expired) == expected


def test_a_chunk_plan_goes_through_xcom_as_json_and_comes_back_equal() -> None:
    chunk = chunk_batches([Batch(100, 200), Batch(0, 100)], 1, 1)[0]
    plan = ChunkPlan.of(chunk, early_stop=True)

    form = json.loads(json.dumps(plan.to_xcom()))

    assert form == {"label": "offsets 0-200", "batches": [[100, 200], [0, 100]], "early_stop": True}
    assert ChunkPlan.from_xcom(form) == plan


# --- the window search's rounds ----------------------------------------------------------------------------------


def test_narrowing_needs_one_answer_per_point_read() -> None:
    from crawler_ops.planning import narrow

    with pytest.raises(ValueError):
        narrow(0, 100, [20, 40], [True])
    with pytest.raises(ValueError):
        narrow(0, 100, [20], [True, False])


@PROPERTY
@given(st.integers(0, 10**6), st.integers(1, 10**6), st.integers(1, 16), st.data())
def test_a_round_reads_distinct_points_inside_the_range_and_narrows_to_the_part_holding_the_first_newer_offset(
    lo: int, span: int, width: int, data: st.DataObject
) -> None:
    from crawler_ops.planning import narrow, probe_points

    hi = lo + span
    boundary = data.draw(st.integers(lo, hi))
    points = probe_points(lo, hi, width)
    assert points == sorted(set(points)) and all(lo <= p < hi for p in points)
    assert len(points) == min(width, span)
    if span <= width:
        assert points == list(range(lo, hi)), "a range of width or fewer offsets is read whole"
    new_lo, new_hi = narrow(lo, hi, points, [p < boundary for p in points])
    assert lo <= new_lo <= boundary <= new_hi <= hi
    assert new_hi - new_lo <= span // (width + 1) + 1 if span > width else new_lo == new_hi == boundary


def test_a_chunk_plan_without_a_label_comes_back_with_an_empty_one() -> None:
    plan = ChunkPlan.from_xcom({"batches": [[0, 10]]})
    assert plan == ChunkPlan("", (Batch(0, 10),), False)
