"""The bound of a backfill that probes for its interval: when records out of date order always lie fewer than
``margin`` offsets apart, the probed range holds every record dated in the interval, wherever the probe's reads fell
(property-tested over disorder, interval, total and the probe's width); with less margin, records are missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawler_ops.config import FilterConfig
from crawler_ops.crawl.ranges import probed_range
from crawler_ops.message.pages import Page

RULE = FilterConfig(timezone="UTC").rule
T0 = datetime(2026, 1, 1, tzinfo=UTC)
STEP_S = 10


class DatedSource:
    """Records whose dates are ``STEP_S`` seconds apart by offset plus a jitter: the hook's one-record reads."""

    def __init__(self, jitter: list[int]) -> None:
        self.dates = [T0 + timedelta(seconds=STEP_S * i + j) for i, j in enumerate(jitter)]

    def get_page(self, offset: int, limit: int) -> Page:
        return Page(
            [
                msgspec.Raw(msgspec.json.encode({"aae397": d.strftime("%Y-%m-%d %H:%M:%S")}))
                for d in self.dates[offset : offset + limit]
            ]
        )

    def inside(self, start: datetime, end: datetime) -> list[int]:
        return [i for i, d in enumerate(self.dates) if start <= d < end]


@st.composite
def disordered(draw: st.DrawFn) -> tuple[list[int], int]:
    """A jitter in ``[0, STEP_S * (disorder + 1))`` each: two records more than ``disorder`` offsets apart stay in
    order, two ``disorder`` apart may not."""
    disorder = draw(st.integers(0, 40))
    total = draw(st.integers(1, 600))
    return [draw(st.integers(0, STEP_S * (disorder + 1) - 1)) for _ in range(total)], disorder


@settings(max_examples=300, deadline=None)
@given(
    disordered(), st.integers(0, 7000), st.integers(1, 4000), st.integers(1, 8), st.integers(1, 50), st.integers(1, 3)
)
@example(([0] * 10, 0), 20, 30, 1, 1, 1)
@example(([0, 0, 0, 19, 0, 0, 0, 0, 0, 0], 1), 45, 1000, 1, 1, 1)  # offset 3 dated inside, offset 4 (probed) before
@example(([0, 0, 0, 0, 0, 19, 0, 0, 0, 0], 1), 0, 65, 1, 1, 1)  # offset 6 dated inside, offset 5 (probed) after
def test_a_range_probed_with_more_margin_than_the_disorder_holds_every_record_of_the_interval(
    dated, start_s, length_s, width, within, extra
):
    jitter, disorder = dated
    source = DatedSource(jitter)
    start = T0 + timedelta(seconds=start_s)
    end = start + timedelta(seconds=length_s)
    margin = disorder + extra

    lo, hi = probed_range(source, len(jitter), RULE, (start, end), width=width, within=within, margin=margin)  # type: ignore[arg-type]

    inside = source.inside(start, end)
    assert all(lo <= i < hi for i in inside), (lo, hi, inside)
    assert hi - lo <= len(inside) + 2 * (margin + disorder) + 2 * within, "and not much more"


def test_records_out_of_order_by_more_than_the_margin_can_be_missed():
    """Offset 50 is dated like offset 50 + 40: a margin of 10 offsets (the interval found exactly) misses it."""
    jitter = [0] * 200
    jitter[50] = STEP_S * 40
    source = DatedSource(jitter)
    start, end = T0 + timedelta(seconds=STEP_S * 80), T0 + timedelta(seconds=STEP_S * 120)
    assert 50 in source.inside(start, end)
    lo, hi = probed_range(source, 200, RULE, (start, end), width=4, within=1, margin=10)  # type: ignore[arg-type]
    assert not lo <= 50 < hi
    lo, hi = probed_range(source, 200, RULE, (start, end), width=4, within=1, margin=41)  # type: ignore[arg-type]
    assert lo <= 50 < hi
