"""Unit tests of crawler_ops.__main__ (the ``python -m crawler_ops`` command line): the status text, and what
import-progress reports without a database."""

from __future__ import annotations

import json
import socket
import unicodedata
from typing import Any

import pytest

from crawler_ops.__main__ import main, render_text


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
                "drift": {"run_id": "manual__1", "summary": "drift: new field remote (boolean, 40 sampled records)"},
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
    assert "field drift: new field remote (boolean, 40 sampled records) (run manual__1)" in text
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


# --------------------------------------------------------------------------- hostile text and numbers (issue 27, 8b/8c)

HOSTILE = "HTTP 500 \x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil\r\nfake line\x00"


def hostile_report() -> dict[str, Any]:
    return {
        "generated_at": "2026-11-29T00:00:00+00:00",
        "tasks": [
            {
                "task_id": "jobs",
                "task_name": "招聘",
                "dag_id": "crawl_jobs",
                "topic": "jobs",
                "progress": "0%",
                "source_error": HOSTILE,
                "db_error": HOSTILE,
                "parked": [HOSTILE],
                "errors_24h": {"records": 1, "batches": 0, "latest": HOSTILE},
            }
        ],
        "executors": [{"name": "e", "dag_id": "exec_e", "status_table": "t", "db_error": HOSTILE}],
        "invalid_tasks": [{"task_id": "bad", "error": HOSTILE}],
    }


def assert_terminal_safe(text: str) -> None:
    unsafe = [hex(ord(c)) for c in text if c != "\n" and (unicodedata.category(c) == "Cc" or c in "\u202e\u2028")]
    assert not unsafe, f"control characters reach the terminal: {unsafe}"


def test_status_text_shows_stored_error_text_with_control_characters_escaped():
    text = render_text(hostile_report())

    assert_terminal_safe(text)
    assert "HTTP 500 \\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202eevil\\r\\nfake line\\x00" in text
    assert "招聘" in text, "printable text of any script is shown as it is"
    assert not any(line.startswith("fake line") for line in text.splitlines())


def test_status_json_escapes_control_characters_and_keeps_the_values(monkeypatch, capsys):
    from crawler_ops.ops import status

    monkeypatch.setattr(status, "collect", lambda *_args, **_kwargs: hostile_report())

    assert main(["status", "--json", "--no-live"]) == 0

    out = capsys.readouterr().out
    assert_terminal_safe(out)
    assert json.loads(out) == hostile_report()


@pytest.mark.parametrize(
    "argv",
    [
        ["skip-batch", "--task", "jobs_beijing", "--offset", str(2**63)],
        ["skip-batch", "--task", "jobs_beijing", "--offset", "-1"],
        ["unpark", "--executor", "e", "--id", str(2**63)],
    ],
    ids=["offset-2^63", "offset-negative", "row-id-2^63"],
)
def test_an_out_of_range_number_is_a_usage_error_exit_2(argv, capsys, postgres_down):
    with pytest.raises(SystemExit) as exited:
        main(argv)

    assert exited.value.code == 2
    assert "out of range" in capsys.readouterr().err


@pytest.fixture
def postgres_down(airflow_connection) -> None:
    """The sample config's crawler database, on a port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    airflow_connection(
        "crawler_db", conn_type="postgres", host="127.0.0.1", port=port, login="u", password="p", schema="db"
    )


def test_skip_batch_with_postgresql_down_says_so_and_exits_2(capsys, postgres_down):
    assert main(["skip-batch", "--task", "jobs_beijing", "--offset", "0"]) == 2

    err = "\n" + capsys.readouterr().err
    assert "\nerror: task jobs_beijing: cannot connect to PostgreSQL (connection 'crawler_db')" in err


def test_skip_batch_without_its_database_connection_says_so_and_exits_2(capsys):
    assert main(["skip-batch", "--task", "jobs_beijing", "--offset", "0"]) == 2

    err = capsys.readouterr().err
    assert err.startswith("error: The conn_id `crawler_db` isn't defined; define it (AIRFLOW_CONN_<ID>")


CSV_HEADER = "task_id,total,last_start_offset,status,filtered_count,produced_count"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("digits.json", '[{"task_id": "jobs_beijing", "total": ' + "1" * 5000 + "}]", "is not valid JSON"),
        ("wide.csv", f"{CSV_HEADER}\n{'x' * 200_000},1,1,idle,0,0\n", "is not a readable CSV"),
    ],
    ids=["deep-json", "5000-digit-number", "200k-field"],
)
def test_import_progress_names_a_file_it_cannot_parse_and_exits_2(
    tmp_path, capsys, postgres_down, name, content, message
):
    path = tmp_path / name
    path.write_text(content)

    assert main(["import-progress", str(path)]) == 2

    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


@pytest.mark.parametrize("field", ["total", "last_start_offset", "filtered_count", "produced_count"])
def test_import_progress_refuses_a_number_beyond_bigint_and_exits_1(tmp_path, capsys, postgres_down, field):
    row = {"task_id": "jobs_beijing", "total": 100, "last_start_offset": 50, "status": "stopped"}
    row |= {"filtered_count": 5, "produced_count": 5, field: 2**63}
    path = tmp_path / "old.json"
    path.write_text(json.dumps([row]))

    assert main(["import-progress", str(path)]) == 1

    out = capsys.readouterr().out
    assert f"field '{field}': {2**63} is out of range (at most {2**63 - 1})" in out
