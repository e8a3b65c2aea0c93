"""Unit tests of crawler_ops.migration.old_status: reading the old crawler service's status export (JSON and CSV) and
planning the import of its positions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crawler_ops.migration.old_status import (
    CurrentProgress,
    ImportFileError,
    OldProgress,
    parse_csv,
    parse_json,
    plan_import,
    read_old_status,
    whole_number,
)

# One task as the old service's get_status() returned it (every field, numbers as it stored them).
OLD_TASK = {
    "task_id": "jobs_beijing",
    "task_name": "北京招聘",
    "total": 12_345,
    "last_start_offset": 12_245,
    "progress": "-",
    "status": "completed",
    "last_update": "2026-11-30 08:00:00",
    "filtered_count": 321,
    "produced_count": 320,
    "is_running": False,
}


def old(task_id: str = "jobs_beijing", last_start_offset: int | None = 1200, row: int = 1) -> OldProgress:
    return OldProgress(row, task_id, 1300, last_start_offset, "completed", 52, 50)


def test_the_status_endpoints_task_list_is_read_with_its_numbers():
    rows, problems = parse_json(json.dumps([OLD_TASK]))

    assert problems == []
    assert rows == [OldProgress(1, "jobs_beijing", 12_345, 12_245, "completed", 321, 320)]


def test_the_whole_status_answer_and_a_single_task_object_are_read_too():
    whole = {"tasks": [OLD_TASK, {**OLD_TASK, "task_id": "jobs_shanghai"}], "kafka_lag": {}, "running_count": 0}

    assert [r.task_id for r in parse_json(json.dumps(whole))[0]] == ["jobs_beijing", "jobs_shanghai"]
    assert [r.task_id for r in parse_json(json.dumps(OLD_TASK))[0]] == ["jobs_beijing"]


def test_numbers_given_as_strings_are_read_and_empty_ones_mean_no_value():
    entry = {**OLD_TASK, "total": "12345", "last_start_offset": " 12,245 ", "filtered_count": "321.0"}
    never_ran = {**OLD_TASK, "task_id": "idle_one", "total": 0, "last_start_offset": None, "status": "idle"}

    rows, problems = parse_json(json.dumps([entry, never_ran, {**never_ran, "task_id": "x", "last_start_offset": ""}]))

    assert problems == []
    assert (rows[0].total, rows[0].last_start_offset, rows[0].filtered_count) == (12_345, 12_245, 321)
    assert rows[1].last_start_offset is None and rows[2].last_start_offset is None


def test_a_csv_with_the_status_columns_is_read_and_extra_columns_ignored():
    text = (
        "task_id,task_name,total,last_start_offset,status,filtered_count,produced_count,is_running\n"
        "jobs_beijing,北京,12345,12245,completed,321,320,False\n"
        "jobs_shanghai,上海,800,700,stopped,0,0,False\n"
    )

    rows, problems = parse_csv(text)

    assert problems == []
    assert rows == [
        OldProgress(1, "jobs_beijing", 12_345, 12_245, "completed", 321, 320),
        OldProgress(2, "jobs_shanghai", 800, 700, "stopped", 0, 0),
    ]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"last_start_offset": "abc"}, "last_start_offset", "'abc' is not a whole number"),
        ({"total": -5}, "total", "-5 is negative"),
        ({"produced_count": 1.5}, "produced_count", "1.5 is not a whole number"),
        ({"filtered_count": True}, "filtered_count", "True is not a whole number"),
        (
            {"status": "paused"},
            "status",
            "'paused' is not one of the old service's statuses (idle, completed, stopped, running, error)",
        ),
        ({"task_id": ""}, "task_id", "'' is not a task id"),
        ({"task_id": True}, "task_id", "row 2: field 'task_id': True is not a task id; put the old task's id"),
        ({"status": "running"}, "status", "still crawling this task"),
        ({"is_running": True}, "status", "still crawling this task"),
        ({"status": "error", "last_start_offset": 0, "total": 0}, "last_start_offset", "position is lost"),
        ({"last_start_offset": 20_000}, "last_start_offset", "above the task's total 12345"),
    ],
    ids=[
        "offset-not-a-number",
        "negative-total",
        "fractional-count",
        "boolean-count",
        "unknown-status",
        "empty-task-id",
        "boolean-task-id",
        "still-running",
        "is-running-flag",
        "error-reset-position",
        "offset-above-total",
    ],
)
def test_a_bad_row_is_reported_with_its_row_field_and_what_to_do(change, field, message):
    good = {**OLD_TASK, "task_id": "good"}

    rows, problems = parse_json(json.dumps([good, {**OLD_TASK, **change}]))

    assert [r.task_id for r in rows] == ["good"], "the good row is still read"
    [problem] = problems
    assert (problem.row, problem.field) == (2, field)
    assert message in problem.describe() and problem.describe().startswith("row 2")


def test_a_missing_field_and_a_repeated_task_id_are_row_problems():
    entry = {k: v for k, v in OLD_TASK.items() if k != "produced_count"}

    rows, problems = parse_json(json.dumps([OLD_TASK, entry, OLD_TASK, "not an object"]))

    assert [r.row for r in rows] == [1]
    assert [(p.row, p.field) for p in problems] == [(2, "produced_count"), (3, "task_id"), (4, "(row)")]
    assert problems[0].describe() == (
        "row 2 (task_id 'jobs_beijing'): field 'produced_count': missing; export the old status endpoint's full "
        "task objects"
    )
    assert "also on row 1" in problems[1].problem
    assert problems[1].describe().startswith("row 3 (task_id 'jobs_beijing'): field 'task_id': also on row 1")
    assert problems[2].describe().startswith("row 4: field '(row)': must be an object with task_id, total,")


def test_rows_after_one_that_is_no_object_are_still_read():
    rows, problems = parse_json(json.dumps(["not an object", OLD_TASK]))

    assert [r.row for r in rows] == [2] and [(p.row, p.field) for p in problems] == [(1, "(row)")]


def test_a_row_without_a_task_id_is_named_by_its_row_only():
    entry = {k: v for k, v in OLD_TASK.items() if k != "task_id"}

    _, [problem] = parse_json(json.dumps([entry]))

    assert problem.task_id is None
    assert problem.describe().startswith("row 1: field 'task_id': missing")


def test_a_csv_without_the_status_columns_is_refused_naming_them():
    with pytest.raises(ImportFileError, match="the CSV header lacks last_start_offset, produced_count"):
        parse_csv("task_id,total,status,filtered_count\njobs,1,completed,0\n", "old.csv")
    columns = "task_id, total, last_start_offset, status, filtered_count, produced_count"
    with pytest.raises(ImportFileError, match=f"^<csv>: the CSV header lacks .*must name the columns {columns}$"):
        parse_csv("task_id\njobs\n")


@pytest.mark.parametrize(
    ("text", "match"),
    [("[{", "is not valid JSON: "), ('"jobs"', ": expected a list of task objects .* got str$")],
    ids=["broken-json", "not-a-list"],
)
def test_a_file_that_is_no_status_export_is_refused(tmp_path: Path, text, match):
    path = tmp_path / "old.json"
    path.write_text(text)

    with pytest.raises(ImportFileError, match=match) as refused:
        read_old_status(path)
    assert str(refused.value).startswith(str(path)), "the message names the file"
    with pytest.raises(ImportFileError, match=r"^<json>"):
        parse_json(text)


def test_a_file_that_is_no_utf8_text_or_a_csv_without_its_columns_is_refused_naming_it(tmp_path: Path):
    binary = tmp_path / "old.json"
    binary.write_bytes(b"[\xff\xfe]")
    with pytest.raises(ImportFileError, match=r"is not UTF-8 text \(.*\); save it as UTF-8$") as refused:
        read_old_status(binary)
    assert str(refused.value).startswith(f"{binary} is not UTF-8 text")
    csv_file = tmp_path / "old.csv"
    csv_file.write_text(json.dumps([OLD_TASK]))
    with pytest.raises(ImportFileError) as refused:
        read_old_status(csv_file)
    assert str(refused.value).startswith(f"{csv_file}: the CSV header lacks "), (
        "a .csv is read as CSV, whatever it holds"
    )


def test_the_format_follows_the_suffix_else_the_first_character(tmp_path: Path):
    csv_text = "task_id,total,last_start_offset,status,filtered_count,produced_count\njobs,10,5,stopped,1,1\n"
    (tmp_path / "status.txt").write_text(json.dumps([OLD_TASK]))
    (tmp_path / "status.csv").write_text(csv_text)
    (tmp_path / "export").write_text("\ufeff" + csv_text)  # a BOM, as spreadsheet programs write
    (tmp_path / "indented").write_text("\n  " + json.dumps([OLD_TASK]))
    (tmp_path / "answer").write_text(json.dumps({"tasks": [OLD_TASK]}))

    assert read_old_status(tmp_path / "status.txt")[0][0].task_id == "jobs_beijing"
    assert read_old_status(tmp_path / "status.csv")[0][0].task_id == "jobs"
    assert read_old_status(tmp_path / "export")[0][0].task_id == "jobs"
    assert read_old_status(tmp_path / "indented")[0][0].task_id == "jobs_beijing", "white space before the ["
    assert read_old_status(tmp_path / "answer")[0][0].task_id == "jobs_beijing", "the status answer's {"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (7, 7),
        ("7", 7),
        (" 1_000 ", 1000),
        ("1__000_", 1000),
        ("9007199254740993", 9007199254740993),
        ("7.0", 7),
        (7.0, 7),
        (None, None),
        ("", None),
        ("None", None),
        (2**63 - 1, 2**63 - 1),
    ],
    ids=[
        "int",
        "text",
        "separators",
        "any-underscores",
        "beyond-float-precision",
        "integral-text",
        "integral-float",
        "null",
        "empty",
        "none-text",
        "bigint-max",
    ],
)
def test_whole_numbers_from_json_or_csv(value, expected):
    assert whole_number(value) == expected


@pytest.mark.parametrize("value", [[1], {"n": 1}, "12x", 1.5, True], ids=["list", "object", "text", "fraction", "bool"])
def test_anything_else_is_no_whole_number_and_the_message_shows_it(value):
    with pytest.raises(ValueError, match=f"^{re.escape(repr(value))} is not a whole number$"):
        whole_number(value)


def test_the_plan_sets_new_and_forward_watermarks_and_skips_tasks_without_a_position():
    rows = [old("new"), old("ahead", 1200), old("never", None)]
    current = {"ahead": CurrentProgress(1000, 1100, 9, 9)}

    steps = plan_import(rows, current, {})

    assert [(s.action, s.new_watermark) for s in steps] == [("set", 1200), ("set", 1200), ("skip", None)]
    assert steps[1].describe() == (
        "ahead: watermark 1000 -> 1200, total 1100 -> 1300, filtered 9 -> 52, produced 9 -> 50 (old status completed)"
    )


def test_the_plan_refuses_to_move_a_watermark_back_unless_forced():
    current = {"jobs": CurrentProgress(1500)}

    [refused] = plan_import([old("jobs", 1200)], current, {})
    [forced] = plan_import([old("jobs", 1200)], current, {}, force=True)

    assert refused.action == "refuse" and "[1200, 1500) would be crawled and published again" in refused.reason
    assert "--force" in refused.describe()
    assert (forced.action, forced.new_watermark) == ("set", 1200)


def test_the_plan_refuses_a_task_whose_run_has_not_committed():
    [step] = plan_import([old("jobs")], {}, {"jobs": ["manual__2026-12-01"]}, force=True)

    assert step.action == "refuse" and "run manual__2026-12-01" in step.reason and step.new_watermark is None


def test_importing_the_stored_watermark_again_is_no_move_back():
    [step] = plan_import([old("jobs", 1500)], {"jobs": CurrentProgress(1500)}, {})

    assert (step.action, step.new_watermark) == ("set", 1500)


def test_each_refusal_and_skip_says_why_and_what_to_do():
    never, running = plan_import(
        [old("never", None), old("busy", row=2)], {}, {"busy": ["manual__1", "scheduled__2"]}, force=True
    )
    assert never.reason == "the old service has no position for this task (it never crawled it); nothing to import"
    assert never.describe() == f"never: watermark - -> - (skipped: {never.reason})"
    assert running.reason == (
        "run manual__1, scheduled__2 of this task planned from the current watermark and has not committed; wait "
        "until it finishes (or mark it failed in the Airflow UI), then import again"
    )
    [back] = plan_import([old("jobs", 1200)], {"jobs": CurrentProgress(1500)}, {})
    assert back.reason.endswith("would be crawled and published again; pass --force to do it")


@pytest.mark.parametrize(
    ("total", "offset", "refused"),
    [(1300, 1300, False), (1300, 1301, True), (0, 5, False), (1, 5, True)],
    ids=["at-total", "above-total", "no-total", "total-1"],
)
def test_a_start_offset_above_a_known_total_is_refused(total, offset, refused):
    entry = {**OLD_TASK, "total": total, "last_start_offset": offset}

    _, problems = parse_json(json.dumps([entry]))

    assert bool(problems) is refused
    if refused:
        assert problems[0].describe() == (
            f"row 1 (task_id 'jobs_beijing'): field 'last_start_offset': {offset} is above the task's total {total}; "
            "check the export (the old service never saved a start offset above its total)"
        )


def test_a_running_or_failed_task_states_its_problem_in_full():
    running = {**OLD_TASK, "status": "running"}
    failed = {**OLD_TASK, "task_id": "failed", "status": "error", "last_start_offset": 0}

    _, problems = parse_json(json.dumps([running, failed]))

    assert [p.describe() for p in problems] == [
        "row 1 (task_id 'jobs_beijing'): field 'status': the old service was still crawling this task when the "
        "status was exported; stop it there (its stop endpoint), wait until it reports 'stopped' or 'completed', "
        "and export the status again",
        "row 2 (task_id 'failed'): field 'last_start_offset': status 'error': the old service overwrote this task's "
        "position with 0 when it failed, so its real position is lost; leave the row out (the first crawl then "
        "searches the date window) or put the offset up to which the old service had published and status "
        "'stopped'",
    ]
