"""The window search of a first crawl: several one-record reads per round find the same offset in fewer rounds."""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.planning import Probe, narrow, search_bracket


def search(
    total: int, boundary: int, width: int, within: int = 1, date: Callable[[int], float] = float
) -> tuple[int, int, int, int]:
    """The bracket found for records older than ``boundary`` below it, record ``o`` dated ``date(o)`` seconds (an
    increasing function: by default a steady pace); rounds and reads it took."""
    reads = 0

    def read(points: list[int]) -> list[Probe]:
        nonlocal reads
        assert points and points == sorted(set(points)) and all(0 <= p < total for p in points)
        assert len(points) <= width
        reads += len(points)
        return [Probe(p < boundary, date(p)) for p in points]

    lo, hi, rounds = search_bracket(total, width, within, read, date(boundary))
    return lo, hi, rounds, reads


def worst_rounds(total: int, width: int, within: int) -> int:
    """Rounds at most: the first narrows ``width + 1`` times, the others ``width - width // 2 + 1`` times."""
    left, rounds = total + 1, 0
    while left > within:
        left, rounds = left / ((width if rounds == 0 else width - width // 2) + 1), rounds + 1
    return rounds + 1


PACES = {
    "steady": float,
    "speeding up": lambda o: math.sqrt(o) * 1e4,  # more records a second as offsets grow
    "bursts": lambda o: float((o // 1000) * 1000 + (o % 1000) // 100),  # a thousand records, then a long pause
}


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 10**9).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, t))),
    st.integers(1, 32),
    st.sampled_from(sorted(PACES)),
)
def test_the_search_finds_the_first_offset_not_older_in_log_rounds(
    case: tuple[int, int], width: int, pace: str
) -> None:
    total, boundary = case
    lo, hi, rounds, reads = search(total, boundary, width, date=PACES[pace])
    assert lo == hi == boundary
    assert rounds <= worst_rounds(total, width, 1)
    assert reads <= rounds * width


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 10**9).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, t))),
    st.integers(1, 32),
    st.integers(1, 10**5),
    st.sampled_from(sorted(PACES)),
)
def test_a_search_to_within_a_span_brackets_the_offset_in_fewer_rounds(
    case: tuple[int, int], width: int, within: int, pace: str
) -> None:
    total, boundary = case
    lo, hi, rounds, reads = search(total, boundary, width, within, PACES[pace])
    assert 0 <= lo <= boundary <= hi <= total
    assert hi - lo < within
    assert rounds <= worst_rounds(total, width, within)
    assert reads <= rounds * width


def test_one_read_per_round_is_a_binary_search() -> None:
    assert search(200_000, 140_000, 1)[2] == 18
    assert search(200_000, 140_000, 4)[2] <= 8


def test_a_first_crawl_finds_a_steady_sources_window_start_within_a_batch_in_two_rounds() -> None:
    """200,000 records, 8 reads a round, the start at 140,000: to within a batch of 1,000, two rounds when the
    records come at a steady pace (the second round's reads go where the first round's dates put the start), three
    at most otherwise; down to the record (evenly spaced reads alone) it took six."""
    lo, hi, rounds, _ = search(200_000, 140_000, 8, 1000)
    assert rounds == 2 and lo <= 140_000 <= hi < lo + 1000
    for pace in PACES.values():
        assert search(200_000, 140_000, 8, 1000, pace)[2] <= 3


def test_without_dates_on_both_sides_a_round_is_evenly_spaced() -> None:
    undated = search_bracket(200_000, 8, 1000, lambda points: [Probe(p < 140_000, None) for p in points])
    assert undated[2] == 3, "nothing to place reads by: 9 parts a round, as a search without dates"


def test_a_record_found_not_older_below_one_found_older_still_narrows_to_a_boundary() -> None:
    # Records only roughly in time order: whatever the reads say, the search ends inside [0, total].
    lo, hi = narrow(0, 100, [20, 40, 60, 80], [True, False, True, False])
    assert (lo, hi) == (21, 40)
