"""Unit tests of crawler_ops.crawl.run: the reference time and the window a run gets from its Airflow context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext
from crawler_ops.filtering import Verdict

CFG = CrawlTaskConfig.model_validate({"id": "unit", "kafka": {"topic": "unit"}, "filter": {"days": 7}})
START = datetime(2026, 11, 19, tzinfo=UTC)
END = datetime(2026, 11, 20, tzinfo=UTC)


def context(run_type: str, **extra: Any) -> dict[str, Any]:
    return {
        "ti": SimpleNamespace(map_index=-1, try_number=1),
        "params": {},
        "run_id": f"{run_type}__2026-11-20",
        "dag_run": SimpleNamespace(run_type=run_type, run_after=END),
        "data_interval_start": START,
        "data_interval_end": END,
        **extra,
    }


def test_a_backfill_run_keeps_its_data_interval_half_open() -> None:
    run = RunContext.from_airflow(CFG, context("backfill"))

    window = run.window
    assert (window.start, window.end, window.half_open) == (START, END, True)
    assert window.verdict(START) is Verdict.KEEP
    assert window.verdict(END) is Verdict.EXPIRED, "a record at the end belongs to the next interval"
    assert not run.uses_status_table


@pytest.mark.parametrize("run_type", ["scheduled", "manual"], ids=["scheduled", "manual"])
def test_a_run_that_moves_the_watermark_keeps_records_newer_than_its_reference(run_type: str) -> None:
    run = RunContext.from_airflow(CFG, context(run_type, logical_date=END))

    window = run.window
    assert run.ref == END and not window.half_open
    assert window.start == END - timedelta(days=7)
    assert window.end >= datetime.now(UTC), "bounded by the wall clock plus the tolerance, not by the reference"
    assert window.verdict(END + timedelta(days=2)) is Verdict.KEEP
    assert window.verdict(datetime.now(UTC) + timedelta(days=2)) is Verdict.BAD_DATE


def test_the_run_hands_its_source_hook_the_process_limiter_of_the_source_connection() -> None:
    from crawler_ops.hooks import ratelimit

    run = RunContext.from_airflow(CFG, context("scheduled"))
    first, second = run.source(), run.source()
    try:
        assert first.limiter is not None
        assert first.limiter is ratelimit.limiter_for(CFG.source, CFG.postgres_conn_id), "the process's one limiter"
        assert second.limiter is first.limiter
        assert first.limiter.users == 2
    finally:
        first.close()
        second.close()
        ratelimit._limiters.clear()
    assert first.limiter.users == 0
