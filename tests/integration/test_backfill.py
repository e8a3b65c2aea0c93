"""Backfill runs on the real stack: each publishes the records of its own data interval ``[start, end)``.

The backfill runs are driven step by step (plan, every chunk, commit) with the run context a backfill DAG run
gets, so several daily intervals can be run back to back without the scheduler.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from tests.support import make_task, read_topic, watermark

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)


def backfill(cfg, start: datetime, end: datetime) -> str:
    """One backfill DAG run of the interval ``[start, end)``, as the scheduler would run it; returns its run id."""
    run = RunContext(cfg, f"backfill__{start:%Y-%m-%d}", end, RunParams(), backfill_interval=(start, end))
    chunks = plan_run(run)
    results = [crawl_chunk(replace(run, map_index=i), chunk) for i, chunk in enumerate(chunks)]
    assert commit_run(run, chunks, results).status == "success"
    return run.run_id


def test_adjacent_backfill_runs_publish_a_record_at_a_day_boundary_once_and_skip_none(
    source, kafka_bootstrap, pg_uri, unique_id
):
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - 10 * DAY
    # 600 records before midnight - 6 h, then one every 6 hours from midnight on: records exactly at midnight,
    # +1 day, +2 days and +3 days (the end of the last interval, so of none of the three).
    source.create(unique_id, total=600, ref=midnight - timedelta(hours=6), in_window_share=0.5, append_step_s=6 * 3600)
    source.append(unique_id, 16)
    boundaries = [midnight + n * DAY for n in range(4)]
    at_boundaries = [source.ids_between(unique_id, b, b + timedelta(seconds=1)) for b in boundaries]
    assert all(len(ids) == 1 for ids in at_boundaries), "one record exactly at each day boundary"
    # Small batches, so the probed range is tight and the boundary records sit near its edges.
    cfg = make_task(unique_id, batch_size=5, source={"concurrency": 2})

    runs = [backfill(cfg, start, end) for start, end in pairwise(boundaries)]

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    by_run = {run: sorted(m.key for m in messages if m.headers["run_id"] == run) for run in runs}
    for run, (start, end) in zip(runs, pairwise(boundaries), strict=True):
        assert by_run[run] == sorted(source.ids_between(unique_id, start, end)), f"run {run}"
        assert len(by_run[run]) == 4, "four records a day, the one at its start included"
    published = Counter(m.key for m in messages)
    for ids in at_boundaries[:3]:
        assert published[next(iter(ids))] == 1, "a boundary record is published by exactly one run"
    assert published[next(iter(at_boundaries[3]))] == 0, "the last interval's end belongs to the next interval"
    assert set(published) == source.ids_between(unique_id, boundaries[0], boundaries[3])
    assert watermark(pg_uri, unique_id) is None, "backfills never touch the watermark"


class Served:
    """The records a data set served, read again without the source: what a probe of it reads."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def get_page(self, offset: int, limit: int) -> list[dict]:
        return self.records[offset : offset + limit]


def test_dates_out_of_order_by_more_than_a_batch_are_missed_past_the_margin_and_all_read_within_it(
    source, kafka_bootstrap, unique_id
):
    """A backfill that probes for its interval reads every record of it when records out of date order lie fewer
    than ``backfill_margin_batches x batch_size`` offsets apart. Here a dense day (one record every 2.3 s, each date
    moved by up to 3 minutes) puts such records more than a batch apart: with the default margin of one batch, the
    records the probe's bracket predicts are missed (exactly those), and a margin past the disorder reads them all."""
    from crawler_ops.config import FilterConfig
    from crawler_ops.crawl.ranges import probed_range
    from crawler_ops.message.filtering import record_date
    from crawler_ops.ops.source_check import Dated, disorder

    ref = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 2 * DAY
    total = 40_000
    source.create(unique_id, total=total, ref=ref, in_window_share=0.05, window_days=7, history_days=8)
    rule = FilterConfig().rule
    served = Served([r for lo in range(0, total, 1_000) for r in source.records(unique_id, lo, 1_000)])
    dates = [record_date(record, rule.fields, rule.tz)[0] for record in served.records]
    widest = disorder(Dated(offset, moment) for offset, moment in enumerate(dates))
    assert widest > 100, f"the data set is out of date order by more than a batch ({widest} offsets)"

    def missed(start: datetime, end: datetime, margin: int) -> set[str]:
        lo, hi = probed_range(served, total, rule, (start, end), width=4, within=100, margin=margin)  # type: ignore[arg-type]
        return {r["id"] for i, r in enumerate(served.records) if start <= dates[i] < end and not lo <= i < hi}

    day = ref - 8 * DAY
    starts = (day + timedelta(minutes=7 * n) for n in range(1, 150))
    start = next((s for s in starts if missed(s, s + timedelta(hours=3), 100)), None)
    assert start is not None, "some interval of the day has a record out of order past one batch at its edge"
    end = start + timedelta(hours=3)
    truth = source.ids_between(unique_id, start, end)
    predicted = missed(start, end, 100)
    assert predicted and not missed(start, end, (widest // 100 + 1) * 100)

    published = {}
    for margin in (1, widest // 100 + 1):
        cfg = make_task(
            f"{unique_id}_m{margin}", backfill_margin_batches=margin, source={"task": unique_id, "concurrency": 4}
        )
        run_id = backfill(cfg, start, end)
        messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
        published[margin] = [m.key for m in messages if m.headers["run_id"] == run_id]
    one_batch, wide = published[1], published[widest // 100 + 1]
    assert sorted(one_batch) == sorted(truth - predicted), "one batch of margin misses exactly what the bound says"
    assert sorted(wide) == sorted(truth), "a margin past the disorder reads every record of the interval, once"
