"""No record is lost whatever an operator does: re-runs of older runs, clear-and-rerun, manual triggers with past
logical dates, reset, backfill, cancellation. Each scenario runs the DAG with ``dag.test()`` on the real stack (a
re-run of a run is ``dag.test()`` with its logical date and ``run_after`` again: the same run id, cleared) and
compares what reached Kafka with the demo source's ground truth.

The data sets end four days before the wall clock and grow by records an hour apart: records arrive days after
the reference time of the runs that publish them, as they do when a run is re-executed later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig
from tests.support import DemoSource, duplicates, make_task, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
INITIAL = 1_000


@pytest.fixture
def start(source: DemoSource, unique_id: str) -> datetime:
    """The data set's reference time, four days ago: 1,000 records, half of them in the 7 days before it; each
    appended record is dated an hour after the one before, the first an hour after this time."""
    ref = datetime.now(UTC).replace(microsecond=0) - 4 * DAY
    source.create(unique_id, total=INITIAL, ref=ref, in_window_share=0.5, append_step_s=3600)
    return ref


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def assert_nothing_lost(
    source: DemoSource, kafka_bootstrap: str, cfg: CrawlTaskConfig, since: datetime, *, once: bool = True
) -> Counter[str]:
    """Every record dated from ``since`` on (the first crawl's window start) is in Kafka, nothing else is; with
    ``once``, each exactly once. Returns how often each key was published."""
    published = read_topic(kafka_bootstrap, cfg.kafka.topic)
    keys = {m.key for m in published}
    expected = source.ids_since(cfg.id, since)
    assert not expected - keys, f"{len(expected - keys)} of {len(expected)} records never reached Kafka"
    assert keys <= expected, f"{len(keys - expected)} records outside every window were published"
    if once:
        assert not duplicates(published)
    return Counter(m.key for m in published)


def test_new_records_survive_a_manual_run_with_a_logical_date_two_days_back(
    source, kafka_bootstrap, pg_uri, unique_id, start, run_dag
):
    """The issue's scenario: first crawl, 50 new postings, a manual trigger two days back, the next normal run."""
    cfg = make_task(unique_id)
    assert run_dag(cfg, start) == "success"
    source.append(unique_id, 50)

    assert run_dag(cfg, start - 2 * DAY) == "success"

    older = run_record(pg_uri, unique_id)
    assert (older["mode"], older["published"], older["expired"]) == ("incremental", 50, 0)
    [note] = older["notes"]
    assert "older than the last committed run's" in note
    assert run_dag(cfg, now()) == "success"
    assert watermark(pg_uri, unique_id) == INITIAL + 50
    assert_nothing_lost(source, kafka_bootstrap, cfg, start - 7 * DAY)


def test_clearing_and_rerunning_the_latest_run_publishes_what_arrived_since(
    source, kafka_bootstrap, pg_uri, unique_id, start, run_dag
):
    cfg = make_task(unique_id)
    first, latest = start - 3 * DAY, start - 2 * DAY
    assert run_dag(cfg, first) == "success"
    source.append(unique_id, 30)
    ran_at = now()
    assert run_dag(cfg, latest, run_after=ran_at) == "success"
    latest_run_id = run_record(pg_uri, unique_id)["run_id"]
    source.append(unique_id, 20)

    assert run_dag(cfg, latest, run_after=ran_at) == "success"  # cleared in the UI: the same run again

    rerun = run_record(pg_uri, unique_id)
    assert rerun["run_id"] == latest_run_id
    assert (rerun["published"], rerun["notes"]) == (20, []), "the latest run re-run is not an older one"
    assert run_dag(cfg, now()) == "success"
    assert watermark(pg_uri, unique_id) == INITIAL + 50
    assert_nothing_lost(source, kafka_bootstrap, cfg, first - 7 * DAY)


def test_a_manual_run_dated_between_two_scheduled_runs_loses_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, start, run_dag
):
    cfg = make_task(unique_id)
    scheduled = [start - 2 * DAY, start - DAY]
    assert run_dag(cfg, scheduled[0]) == "success"
    source.append(unique_id, 20)
    assert run_dag(cfg, scheduled[1]) == "success"
    source.append(unique_id, 20)

    assert run_dag(cfg, scheduled[0] + timedelta(hours=12)) == "success"

    manual = run_record(pg_uri, unique_id)
    assert manual["published"] == 20 and len(manual["notes"]) == 1
    source.append(unique_id, 10)
    assert run_dag(cfg, now()) == "success"
    assert watermark(pg_uri, unique_id) == INITIAL + 50
    assert_nothing_lost(source, kafka_bootstrap, cfg, scheduled[0] - 7 * DAY)


def test_reset_then_backfill_then_incremental_loses_nothing(source, kafka_bootstrap, pg_uri, unique_id, start, run_dag):
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run

    cfg = make_task(unique_id)
    assert run_dag(cfg, start) == "success"
    source.append(unique_id, 20)
    assert run_dag(cfg, start + timedelta(hours=12), {"reset": True}) == "success"
    assert watermark(pg_uri, unique_id) == INITIAL + 20

    interval = (start - 3 * DAY, start - 2 * DAY)
    backfill = RunContext(cfg, "backfill__ops", interval[1], RunParams(), backfill_interval=interval)
    chunks = plan_run(backfill)
    results = [crawl_chunk(replace(backfill, map_index=i), chunk) for i, chunk in enumerate(chunks)]
    assert commit_run(backfill, chunks, results).status == "success"
    backfilled = [m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic) if m.headers["run_id"] == "backfill__ops"]
    assert sorted(backfilled) == sorted(source.ids_between(unique_id, *interval)) and backfilled
    assert watermark(pg_uri, unique_id) == INITIAL + 20, "a backfill never moves the watermark"

    source.append(unique_id, 20)
    assert run_dag(cfg, now()) == "success"

    assert run_record(pg_uri, unique_id)["published"] == 20
    assert watermark(pg_uri, unique_id) == INITIAL + 40
    counts = assert_nothing_lost(source, kafka_bootstrap, cfg, start - 7 * DAY, once=False)
    newest = source.ids_since(unique_id, start + timedelta(hours=21))  # the last 20 appended
    assert len(newest) == 20 and all(counts[key] == 1 for key in newest)


def test_a_cancelled_run_then_a_rerun_of_an_older_run_loses_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, start, run_dag, use_config: Callable[..., Any]
):
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import crawl_chunk, plan_run
    from crawler_ops.ops.listener import close_run

    cfg = make_task(unique_id, batch_size=10, min_batches_per_chunk=1, max_chunks=5)
    first_ran_at = now()
    assert run_dag(cfg, start, run_after=first_ran_at) == "success"
    first_run_id = run_record(pg_uri, unique_id)["run_id"]
    source.append(unique_id, 50)

    # A scheduled run crawls its newest chunk, then is marked failed in the UI before the others run.
    cancelled = RunContext(cfg, "scheduled__cancelled", now() - timedelta(hours=1), RunParams())
    chunks = plan_run(cancelled)
    assert len(chunks) == 5
    assert crawl_chunk(replace(cancelled, map_index=0), chunks[0])["published"] == 10
    use_config(cfg)
    close_run(cfg.dag_id, cancelled.run_id, "marked failed in the UI")
    assert run_record(pg_uri, unique_id)["status"] == "failed"
    assert watermark(pg_uri, unique_id) == INITIAL

    assert run_dag(cfg, start, run_after=first_ran_at) == "success"  # the first run, cleared and run again

    rerun = run_record(pg_uri, unique_id)
    assert rerun["run_id"] == first_run_id
    assert rerun["published"] == 40, "the batch the cancelled run finished is not redone"
    assert run_dag(cfg, now()) == "success"
    assert watermark(pg_uri, unique_id) == INITIAL + 50
    assert_nothing_lost(source, kafka_bootstrap, cfg, start - 7 * DAY)
