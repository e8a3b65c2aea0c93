"""The window search of a first crawl: several one-record reads per round find the same offset in fewer rounds."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.planning import narrow, probe_points


def search(total: int, boundary: int, width: int) -> tuple[int, int, int]:
    """The offset found for records older than ``boundary`` below it; rounds and reads it took."""
    lo, hi, rounds, reads = 0, total, 0, 0
    while lo < hi:
        points = probe_points(lo, hi, width)
        assert points and all(lo <= p < hi for p in points) and points == sorted(set(points))
        lo, hi = narrow(lo, hi, points, [p < boundary for p in points])
        rounds, reads = rounds + 1, reads + len(points)
    return lo, rounds, reads


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**9).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, t))), st.integers(1, 32))
def test_the_search_finds_the_first_offset_not_older_in_log_rounds(case: tuple[int, int], width: int) -> None:
    total, boundary = case
    found, rounds, reads = search(total, boundary, width)
    assert found == boundary
    assert rounds <= math.ceil(math.log(total + 1, width + 1)) + 1
    assert reads <= rounds * width


def test_one_read_per_round_is_a_binary_search() -> None:
    assert search(200_000, 140_000, 1)[1] == 18
    assert search(200_000, 140_000, 4)[1] <= 8


def test_a_record_found_not_older_below_one_found_older_still_narrows_to_a_boundary() -> None:
    # Records only roughly in time order: whatever the reads say, the search ends inside [0, total].
    lo, hi = narrow(0, 100, [20, 40, 60, 80], [True, False, True, False])
    assert (lo, hi) == (21, 40)
