"""Unit tests of crawler_ops.results: a run record read back from its row, and what a commit adds from it."""

from __future__ import annotations

from datetime import UTC, datetime

from crawler_ops.results import RunCounts, RunRecord

REF = datetime(2026, 11, 20, tzinfo=UTC)
ROW = {
    "mode": "incremental",
    "total": 1_000,
    "old_watermark": 500,
    "new_watermark": None,
    "planned": 5,
    "fetched": 500,
    "kept": 40,
    "published": 38,
    "expired": 460,
    "dead_lettered": 2,
    "pages": 5,
    "errors": ["batch [0, 100): HTTP 503"],
    "notes": [],
    "ref_time": REF,
    "status": "running",
    "started_at": REF,
    "finished_at": None,
    "committed_kept": 30,
    "committed_published": 28,
}


def test_a_run_record_reads_its_row_and_counts_what_its_commits_have_not_added_yet() -> None:
    record = RunRecord.from_row(ROW)

    assert (record.mode, record.status, record.total, record.old_watermark, record.planned) == (
        "incremental",
        "running",
        1_000,
        500,
        5,
    )
    assert record.counts == RunCounts(pages=5, fetched=500, kept=40, published=38, expired=460, dead_lettered=2)
    assert record.errors == ("batch [0, 100): HTTP 503",) and record.notes == ()
    assert (record.uncommitted_kept, record.uncommitted_published) == (10, 10)
