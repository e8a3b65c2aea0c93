"""The window search of a first crawl: several one-record reads per round find the same offset in fewer rounds."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.planning import narrow, search_bracket


def search(total: int, boundary: int, width: int, within: int = 1) -> tuple[int, int, int, int]:
    """The bracket found for records older than ``boundary`` below it; rounds and reads it took."""
    reads = 0

    def older(points: list[int]) -> list[bool]:
        nonlocal reads
        assert points and points == sorted(set(points))
        reads += len(points)
        return [p < boundary for p in points]

    lo, hi, rounds = search_bracket(total, width, within, older)
    return lo, hi, rounds, reads


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**9).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, t))), st.integers(1, 32))
def test_the_search_finds_the_first_offset_not_older_in_log_rounds(case: tuple[int, int], width: int) -> None:
    total, boundary = case
    lo, hi, rounds, reads = search(total, boundary, width)
    assert lo == hi == boundary
    assert rounds <= math.ceil(math.log(total + 1, width + 1)) + 1
    assert reads <= rounds * width


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 10**9).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, t))),
    st.integers(1, 32),
    st.integers(1, 10**5),
)
def test_a_search_to_within_a_span_brackets_the_offset_in_fewer_rounds(
    case: tuple[int, int], width: int, within: int
) -> None:
    total, boundary = case
    lo, hi, rounds, reads = search(total, boundary, width, within)
    assert 0 <= lo <= boundary <= hi <= total
    assert hi - lo < within
    assert rounds <= max(0, math.ceil(math.log((total + 1) / within, width + 1))) + 1
    assert rounds <= search(total, boundary, width)[2]
    assert reads <= rounds * width


def test_one_read_per_round_is_a_binary_search() -> None:
    assert search(200_000, 140_000, 1)[2] == 18
    assert search(200_000, 140_000, 4)[2] <= 8


def test_a_first_crawl_searches_to_within_a_batch_in_half_the_rounds() -> None:
    """200,000 records, 8 reads a round: 6 rounds down to the record, 3 to within a batch of 1,000."""
    assert search(200_000, 140_000, 8)[2] == 6
    lo, hi, rounds, _ = search(200_000, 140_000, 8, 1000)
    assert rounds == 3 and lo <= 140_000 <= hi < lo + 1000


def test_a_record_found_not_older_below_one_found_older_still_narrows_to_a_boundary() -> None:
    # Records only roughly in time order: whatever the reads say, the search ends inside [0, total].
    lo, hi = narrow(0, 100, [20, 40, 60, 80], [True, False, True, False])
    assert (lo, hi) == (21, 40)
