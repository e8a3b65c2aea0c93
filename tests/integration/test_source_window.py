"""``source.window_filter`` on the real stack: backfills read the window's filtered view (checked against the count
the source reports), first crawls count the window instead of searching for it.

Runs are driven step by step (plan, every chunk, commit) as in test_backfill.py; the demo source filters by ``from``
and ``to`` (dev/demo_source/window.py) and counts every request it answers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from crawler_ops.errors import SourceError
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.ops.status import stored_status
from tests.support import cli, duplicates, make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
#: The demo source's filter: wall times in the source's zone (filter.timezone, Asia/Shanghai by default).
WINDOW_FILTER = {
    "query": {"from": "{window_start:%Y-%m-%d %H:%M:%S}", "to": "{window_end:%Y-%m-%d %H:%M:%S}"},
}


def backfill(cfg: CrawlTaskConfig, start: datetime, end: datetime) -> tuple[RunContext, list[Any], Any]:
    """One backfill run of ``[start, end)``: its context, chunk results (an exception for a chunk that failed) and
    summary."""
    run = RunContext(cfg, f"backfill__{start:%Y-%m-%dT%H}", end, RunParams(), backfill_interval=(start, end))
    return run, *crawl(run)


def crawl(run: RunContext) -> tuple[list[Any], Any]:
    chunks = plan_run(run)
    results: list[Any] = []
    for index, chunk in enumerate(chunks):
        try:
            results.append(crawl_chunk(replace(run, map_index=index), chunk))
        except SourceError as exc:
            results.append(exc)
    done = [r for r in results if not isinstance(r, Exception)]
    return results, commit_run(run, chunks, done)


def test_a_filtered_backfill_publishes_exactly_its_window_with_fewer_requests_than_probing(
    source, kafka_bootstrap, pg_uri, unique_id
):
    ref = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - DAY
    source.create(unique_id, total=30_000, ref=ref, in_window_share=0.3)
    start, end = ref - 4 * DAY, ref - DAY
    truth = source.ids_between(unique_id, start, end)
    filtered = make_task(f"{unique_id}_f", source={"task": unique_id, "window_filter": WINDOW_FILTER})
    probing = make_task(f"{unique_id}_p", source={"task": unique_id})
    seen = {}
    for cfg in (filtered, probing):
        source.clear_requests(unique_id)
        *_, summary = backfill(cfg, start, end)
        assert summary.status == "success", summary.errors
        seen[cfg.id] = source.requests_seen(unique_id)
        keys = [m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)]
        assert sorted(keys) == sorted(truth), f"{cfg.id}: exactly the window's records, once each"
        assert watermark(pg_uri, cfg.id) is None, "backfills never touch the watermark"
    pages = -(-len(truth) // filtered.batch_size)
    assert seen[filtered.id] == {"count": 1, "list": pages}, "one filtered count, then the view's pages"
    assert seen[probing.id]["list"] > seen[filtered.id]["list"], seen
    assert run_record(pg_uri, filtered.id)["total"] == len(truth), "the run's total is the window's count"


def test_a_filter_that_drops_rows_fails_the_backfill_naming_the_window_and_the_count(
    source, kafka_bootstrap, pg_uri, unique_id
):
    ref = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - DAY
    source.create(unique_id, total=5_000, ref=ref, in_window_share=0.5, window={"drop_every": 97})
    cfg = make_task(unique_id, source={"window_filter": WINDOW_FILTER})
    first = RunContext(cfg, "first", ref, RunParams())
    assert crawl(first)[1].status == "success"
    before = watermark(pg_uri, unique_id)
    assert before == 5_000

    start, end = ref - 3 * DAY, ref - DAY
    _run, results, summary = backfill(cfg, start, end)

    count = len(source.ids_between(unique_id, start, end))
    assert summary.status == "failed"
    assert any(isinstance(r, SourceError) and "holds 99 records instead of 100" in str(r) for r in results)
    record = run_record(pg_uri, unique_id)
    window = f"[{start.isoformat()}, {end.isoformat()})"
    checks = [e for e in record["errors"] if f"counted {count} records dated in {window}" in e]
    assert checks and "the run received" in checks[0], record["errors"]
    assert any(f"task {unique_id}: window filter" in e for e in record["errors"])
    assert checks[0] in json.dumps(stored_status(cfg), default=str), "the status view shows why the run failed"
    assert watermark(pg_uri, unique_id) == before, "a backfill never moves the watermark"


def test_a_filtered_first_crawl_with_appends_between_its_counts_then_an_incremental_run_lose_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, monkeypatch
):
    now = datetime.now(UTC).replace(microsecond=0)
    source.create(unique_id, total=20_000, ref=now - timedelta(hours=2), in_window_share=0.2, append_step_s=1)
    # One batch of margin below the counted window start: appends around the window's count (more than that margin)
    # would lose records if the window start were taken from a total counted after the window.
    cfg = make_task(unique_id, max_expired_batches=1, source={"window_filter": WINDOW_FILTER})
    get_total = SourceApiHook.get_total
    appended = []

    def appends_around_the_window_count(hook: SourceApiHook, known: int | None = None) -> int:
        if not hook.paging.filtered:
            return get_total(hook, known)
        appended.append(source.append(unique_id, 1_000))
        count = get_total(hook, known)
        appended.append(source.append(unique_id, 1_000))
        return count

    monkeypatch.setattr(SourceApiHook, "get_total", appends_around_the_window_count)
    source.clear_requests(unique_id)
    first = RunContext(cfg, "first", now, RunParams())
    summary = crawl(first)[1]
    assert summary.status == "success", summary.errors
    assert appended == [21_000, 22_000]
    assert watermark(pg_uri, unique_id) == 20_000, "the first crawl ends at the total it counted first"
    probes = [r for r in source._json("GET", f"/admin/tasks/{unique_id}/requests")["requests"] if r["limit"] == 1]
    assert probes == [], "no one-record probes: the window was counted"
    monkeypatch.undo()
    source.append(unique_id, 500)  # and more while no run is on

    second = RunContext(cfg, "incremental", now + timedelta(minutes=5), RunParams())
    assert crawl(second)[1].status == "success"

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    wanted = source.ids_since(unique_id, first.window.start)
    assert set(m.key for m in messages) == wanted, "0 lost"
    assert not duplicates(messages), "0 duplicates"
    assert watermark(pg_uri, unique_id) == 22_500


def test_a_first_crawl_whose_window_count_leaves_out_records_fails_and_leaves_no_watermark(
    source, kafka_bootstrap, pg_uri, unique_id
):
    now = datetime.now(UTC).replace(microsecond=0)
    source.create(
        unique_id, total=6_000, ref=now - timedelta(hours=1), in_window_share=0.3, window={"count_short": 300}
    )
    cfg = make_task(unique_id, max_expired_batches=1, source={"window_filter": WINDOW_FILTER})
    run = RunContext(cfg, "first", now, RunParams())

    summary = crawl(run)[1]

    count = len(source.ids_since(unique_id, run.window.start)) - 300
    assert summary.status == "failed"
    record = run_record(pg_uri, unique_id)
    assert record["window_count"] == count
    message = next(e for e in record["errors"] if "window filter" in e)
    assert f"task {unique_id}: window filter: the source counted {count} records dated from" in message
    assert f"{run.window.start.isoformat()} on, and the first crawl kept {record['kept']} of" in message
    assert record["kept"] > count
    assert message in json.dumps(stored_status(cfg), default=str), "the status view shows why the run failed"
    assert watermark(pg_uri, unique_id) is None, "a failed first crawl sets no watermark"
    rows = query(pg_uri, "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s", unique_id)
    assert rows == [(0,)], "nor keeps batch rows that would skip records below the counted window start"


def test_validate_rejects_a_window_filter_that_does_not_send_both_bounds(tmp_path, unique_id):
    cfg = make_task(unique_id, source={"window_filter": WINDOW_FILTER})
    entry = cfg.model_dump(mode="json")
    entry["source"]["window_filter"]["query"] = {"from": "{window_start:%Y-%m-%d}"}
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": [entry]}, allow_unicode=True))

    result = cli("validate", str(path))

    assert result.returncode != 0
    assert unique_id in result.stdout + result.stderr
    assert "window_filter: no query or body template sends {window_end}" in result.stdout + result.stderr


def test_a_filter_sent_in_the_wrong_zone_fails_the_backfill_for_the_records_dated_outside_the_window(
    source, pg_uri, unique_id
):
    ref = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - DAY
    source.create(unique_id, total=5_000, ref=ref, in_window_share=0.5)
    # The window is sent as UTC wall times, which the source reads as Shanghai's: 8 hours early.
    cfg = make_task(
        unique_id,
        filter={"timezone": "UTC", "date_fields": ["Collect_time"]},
        source={"window_filter": WINDOW_FILTER},
    )
    start, end = ref - 3 * DAY, ref - DAY

    results, summary = backfill(cfg, start, end)[1:]

    assert not any(isinstance(r, Exception) for r in results), "every page was full"
    assert summary.status == "failed"
    record = run_record(pg_uri, unique_id)
    # Collect_time is up to 15 minutes after the true date the source filters by: about the records of the 8 hours
    # before the window (the view's first), less a few at its edge.
    early = record["expired"]
    assert 0 < early <= len(source.ids_between(unique_id, start - timedelta(hours=8), start + timedelta(minutes=15)))
    message = (
        f"task {unique_id}: window filter: the source counted {record['total']} records dated in "
        f"[{start.isoformat()}, {end.isoformat()}) and the run received {record['fetched']}, {early} of them dated "
        "outside it: the source's filter drops or misplaces records; the backfill failed"
    )
    assert message in record["errors"]


def test_a_filtered_backfill_reads_the_view_by_page_number_with_a_page_paginator(source, kafka_bootstrap, unique_id):
    ref = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - DAY
    source.create(unique_id, total=8_000, ref=ref, in_window_share=0.4)
    cfg = make_task(
        unique_id,
        source={"page_path": "/api/{task}/pages", "paginator": {"type": "page"}, "window_filter": WINDOW_FILTER},
    )
    start, end = ref - 2 * DAY, ref - DAY
    source.clear_requests(unique_id)

    summary = backfill(cfg, start, end)[2]

    assert summary.status == "success", summary.errors
    truth = source.ids_between(unique_id, start, end)
    assert sorted(m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)) == sorted(truth)
    pages = sorted(r["page"] for r in source._json("GET", f"/admin/tasks/{unique_id}/requests")["requests"])
    assert pages == list(range(1, -(-len(truth) // 100) + 1)), "pages 1.. of the view, each once"
