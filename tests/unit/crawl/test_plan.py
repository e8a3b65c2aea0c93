"""Unit tests of the plan step's guards against absurd totals: the cap on what one run plans, and a total that
jumps far beyond the last known one."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.plan import check_total_jump
from crawler_ops.crawl.ranges import probe_window_start, take_batches
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.errors import SourceError
from crawler_ops.planning import Batch, iter_plan
from tests.waiting import python_calls

REF = datetime(2026, 11, 20, tzinfo=UTC)


def run_of(params: RunParams | None = None, **task: Any) -> RunContext:
    cfg = CrawlTaskConfig.model_validate({"id": "jobs", "kafka": {"topic": "jobs"}, **task})
    return RunContext(cfg, "manual__1", REF, params or RunParams())


def test_max_batches_1_of_a_total_of_ten_to_the_twelve_plans_one_batch_in_bounded_memory_and_time():
    run = run_of(RunParams(dry_run=True, max_batches=1))
    tracemalloc.start()
    batches, calls = python_calls(lambda: take_batches(run, iter_plan(10**12, 0, run.cfg.batch_size), 10**12, 0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert batches == [Batch(10**12 - 100, 10**12)]
    assert peak < 64 * 1024 and calls < 200, f"{peak} bytes, {calls} Python calls"


@pytest.mark.parametrize("max_batches", [None, 1_001], ids=["no-max-batches", "max-batches-over-the-cap"])
def test_a_plan_over_max_planned_batches_fails_naming_the_task_the_total_the_cap_and_what_to_do(max_batches):
    run = run_of(RunParams(max_batches=max_batches), max_planned_batches=1_000)
    tracemalloc.start()
    with pytest.raises(SourceError) as err:
        take_batches(run, iter_plan(10**12, 5_000, 100), 10**12, 5_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    message = str(err.value)
    assert err.value.retriable is False
    assert "task jobs: the source total 1000000000000 leaves more than max_planned_batches (1000)" in message
    assert "above offset 5000" in message and "max_batches (at most 1000)" in message
    assert "raise max_planned_batches" in message
    assert peak < 2 * 2**20, f"{peak} bytes: no more than the cap is made"


def test_a_plan_within_the_cap_is_the_whole_plan():
    run = run_of(max_planned_batches=10)

    assert take_batches(run, iter_plan(1_000, 0, 100), 1_000, 0) == [Batch(lo, lo + 100) for lo in range(900, -1, -100)]


def test_a_total_jumping_beyond_the_factor_fails_naming_both_totals_and_how_to_confirm():
    run = run_of(total_jump_factor=10)

    with pytest.raises(SourceError) as err:
        check_total_jump(run, 120_000, 10**12)

    assert err.value.retriable is False
    assert str(err.value).startswith(
        "task jobs: the source total jumped from 120000 to 1000000000000, more than total_jump_factor (10) times "
        "the last known total; nothing planned."
    )
    assert 'trigger with {"confirm_total": 1000000000000}' in str(err.value)


def test_a_confirmed_total_is_planned_and_a_confirmation_of_another_total_is_not():
    check_total_jump(run_of(RunParams(confirm_total=10**12)), 120_000, 10**12)

    with pytest.raises(SourceError, match=r"\(confirm_total 999 is not that total\)"):
        check_total_jump(run_of(RunParams(confirm_total=999)), 120_000, 10**12)


@pytest.mark.parametrize(
    ("known", "total"),
    [(None, 10**12), (120_000, 1_200_000), (120_000, 50), (3, 1_000)],
    ids=["first-crawl", "exactly-the-factor", "shrinking", "small-known-total-counts-as-one-batch"],
)
def test_totals_within_the_factor_or_without_a_known_total_pass(known, total):
    check_total_jump(run_of(batch_size=100, total_jump_factor=10), known, total)


def test_confirm_total_is_a_run_param():
    assert RunParams.from_params({"confirm_total": 10**12}, "jobs").confirm_total == 10**12


class DatedSource:
    """A source whose record at offset ``o`` is dated ``o`` seconds after the reference's window start minus
    ``boundary`` seconds: records below ``boundary`` are older than the window."""

    def __init__(self, run: RunContext, boundary: int) -> None:
        self.start, self.boundary, self.reads = run.window.start, boundary, 0

    def get_page(self, offset: int, limit: int) -> list[dict[str, str]]:
        self.reads += 1
        moment = self.start + timedelta(seconds=offset - self.boundary)
        return [{"aae397": moment.isoformat()}]


@pytest.mark.parametrize("boundary", [0, 1, 999, 1000, 123_457, 199_999, 200_000])
def test_a_first_crawl_takes_the_window_start_at_most_a_batch_below_the_true_one_never_above(boundary):
    """Above the true start, in-window records would be recorded expired unread; within a batch below it, the crawl
    reads at most one batch more (filtered out as expired), for half the rounds of a search down to the record."""
    run = run_of(batch_size=1000, source={"task": "t", "concurrency": 8})
    source = DatedSource(run, boundary)
    start = probe_window_start(source, 200_000, run)  # type: ignore[arg-type]
    assert boundary - 1000 < start <= boundary
    assert source.reads <= 3 * 8
