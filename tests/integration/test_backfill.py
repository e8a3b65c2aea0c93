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
