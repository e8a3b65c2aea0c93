"""Unit tests of crawler_ops.__main__ (the ``python -m crawler_ops`` command line): the status text, and what
import-progress reports without a database."""

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


def test_import_progress_names_a_file_it_cannot_read_and_exits_2(tmp_path, capsys):
    from crawler_ops.__main__ import main

    assert main(["import-progress", str(tmp_path / "missing.json")]) == 2

    assert "cannot read" in capsys.readouterr().err


def test_import_progress_reports_unknown_task_ids_and_bad_rows_and_exits_1(tmp_path, capsys):
    from crawler_ops.__main__ import main

    path = tmp_path / "old.csv"
    path.write_text(
        "task_id,total,last_start_offset,status,filtered_count,produced_count\n"
        "no_such_task,100,50,completed,5,5\n"
        "other_unknown,100,x,completed,5,5\n"
    )

    assert main(["import-progress", str(path), "--apply"]) == 1

    out = capsys.readouterr().out
    assert "row 1 (task_id 'no_such_task'): no crawl task with this id in the config" in out
    assert "row 2 (task_id 'other_unknown'): field 'last_start_offset': 'x' is not a whole number" in out
    assert "nothing written" in out
