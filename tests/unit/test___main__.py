"""Unit tests of crawler_ops.__main__ (the ``python -m crawler_ops`` command line): the status text."""

from __future__ import annotations

from crawler_ops.__main__ import render_text


def test_status_text_shows_the_old_service_fields_and_errors():
    report = {
        "generated_at": "2026-11-29T00:00:00+00:00",
        "tasks": [
            {
                "task_id": "jobs",
                "task_name": "招聘",
                "dag_id": "crawl_jobs",
                "topic": "jobs",
                "running": None,
                "source_total": None,
                "source_error": "ConnectError: refused",
                "total": 100,
                "watermark": 90,
                "progress": "90.0%",
                "last_start_offset": None,
                "status": "incomplete",
                "last_update": "2026-11-28",
                "filtered_count": 5,
                "produced_count": 5,
                "kafka": {"messages": 5, "groups": {"g": {"lag": 2}, "h": {"error": "unknown group"}}},
                "errors_24h": {"records": 1, "batches": 2, "latest": "HTTP 500"},
            }
        ],
        "invalid_tasks": [{"task_id": "bad", "error": "field 'batch_size': too small"}],
    }

    text = render_text(report)

    assert "jobs (招聘)  dag crawl_jobs  topic jobs" in text
    assert "source total ? (ConnectError: refused)" in text and "watermark 90 (90.0%)" in text
    assert "last start offset -" in text and "running unknown" in text and "filtered 5  produced 5" in text
    assert "errors (24h): 1 records, 2 batch/plan; latest: HTTP 500" in text
    assert "5 messages; g lag 2, h ? (unknown group)" in text
    assert "bad: INVALID CONFIG: field 'batch_size': too small" in text
