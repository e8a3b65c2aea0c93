"""Pure: read the old crawler service's status output and decide, per task, what an import does to its progress.

The old service's status endpoint returned, per task, ``task_id``, ``total``, ``last_start_offset``, ``status``,
``filtered_count`` and ``produced_count`` (with ``task_name``, ``progress``, ``last_update`` and ``is_running``
besides). Exports of it come as that JSON (a list of task objects, the endpoint's ``{"tasks": [...]}`` answer, or
one task's object) or as a CSV with those columns; numbers may be strings. Nothing here touches a database.
"""

from __future__ import annotations

import csv
import io
import json
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawler_ops.errors import CrawlerError

REQUIRED_FIELDS = ("task_id", "total", "last_start_offset", "status", "filtered_count", "produced_count")
# Statuses the old service wrote. 'running' is its live flag, not a saved state: the export was taken while that
# task was still crawling, so its position is about to change.
OLD_STATUSES = ("idle", "completed", "stopped", "running", "error")
NULL_TEXTS = ("", "none", "null", "-")
# Offsets and counts are PostgreSQL bigints.
BIGINT_MAX = 2**63 - 1


class ImportFileError(CrawlerError):
    """The old status file cannot be read at all (missing, not JSON or CSV, wrong top-level shape, no header)."""


@dataclass(frozen=True)
class OldProgress:
    """One task's progress as the old service reported it; ``row`` is its place in the file (1 = first task)."""

    row: int
    task_id: str
    total: int | None
    last_start_offset: int | None
    status: str
    filtered_count: int
    produced_count: int

    def state_problems(self, entry: Mapping[str, Any]) -> list[RowProblem]:
        """This row's problems when its values are valid but its position cannot be trusted."""

        def problem(name: str, text: str) -> list[RowProblem]:
            return [RowProblem(self.row, self.task_id, name, text)]

        if self.status == "running" or str(entry.get("is_running", "")).strip().lower() == "true":
            return problem(
                "status",
                "the old service was still crawling this task when the status was exported; stop it there "
                "(its stop endpoint), wait until it reports 'stopped' or 'completed', and export the status again",
            )
        if self.status == "error" and not self.last_start_offset:
            return problem(
                "last_start_offset",
                "status 'error': the old service overwrote this task's position with 0 when it failed, so its real "
                "position is lost; leave the row out (the first crawl then searches the date window) or put the offset "
                "up to which the old service had published and status 'stopped'",
            )
        if self.total is not None and self.last_start_offset is not None and self.last_start_offset > self.total > 0:
            return problem(
                "last_start_offset",
                f"{self.last_start_offset} is above the task's total {self.total}; check the export (the old service "
                "never saved a start offset above its total)",
            )
        return []


@dataclass(frozen=True)
class RowProblem:
    """A row that cannot be imported: which row (1 is the first task; in a CSV, the line after the header), which
    field, what is wrong and what to do."""

    row: int
    task_id: str | None
    field: str
    problem: str

    def describe(self) -> str:
        task = f" (task_id {self.task_id!r})" if self.task_id else ""
        return f"row {self.row}{task}: field '{self.field}': {self.problem}"


def read_old_status(path: Path) -> tuple[list[OldProgress], list[RowProblem]]:
    """The rows of an old status export (JSON or CSV, chosen by the suffix, else by the first character)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ImportFileError(f"cannot read {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ImportFileError(f"{path} is not UTF-8 text ({exc}); save it as UTF-8") from exc
    is_json = path.suffix.lower() == ".json" or (path.suffix.lower() != ".csv" and text.lstrip()[:1] in ("[", "{"))
    return parse_json(text, str(path)) if is_json else parse_csv(text, str(path))


def parse_json(text: str, origin: str = "<json>") -> tuple[list[OldProgress], list[RowProblem]]:
    try:
        document = json.loads(text)
    except RecursionError as exc:
        raise ImportFileError(f"{origin}: its JSON is nested too deeply to read; export the status again") from exc
    except ValueError as exc:  # JSONDecodeError, and a number of more than 4300 digits
        raise ImportFileError(f"{origin} is not valid JSON: {exc}") from exc
    if isinstance(document, Mapping):
        # The status endpoint answered {"tasks": [...], ...} for all tasks and one task's object for one.
        document = document.get("tasks", [document])
    if not isinstance(document, list):
        raise ImportFileError(
            f"{origin}: expected a list of task objects (the old status endpoint's 'tasks'), "
            f"got {type(document).__name__}"
        )
    return parse_rows(document)


def parse_csv(text: str, origin: str = "<csv>") -> tuple[list[OldProgress], list[RowProblem]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [name.strip() for name in reader.fieldnames or ()]
    missing = [name for name in REQUIRED_FIELDS if name not in header]
    if missing:
        raise ImportFileError(
            f"{origin}: the CSV header lacks {', '.join(missing)}; the first line must name the columns "
            f"{', '.join(REQUIRED_FIELDS)}"
        )
    try:
        rows = [{(k or "").strip(): v for k, v in row.items()} for row in reader]
    except csv.Error as exc:  # a field over csv's size limit
        raise ImportFileError(f"{origin} is not a readable CSV: line {reader.line_num}: {exc}") from exc
    return parse_rows(rows)


def parse_rows(entries: Sequence[Any]) -> tuple[list[OldProgress], list[RowProblem]]:
    """Validate each entry on its own; a task id seen twice is a problem of its second row."""
    rows: list[OldProgress] = []
    problems: list[RowProblem] = []
    seen: dict[str, int] = {}
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, Mapping):
            problems.append(RowProblem(number, None, "(row)", f"must be an object with {', '.join(REQUIRED_FIELDS)}"))
            continue
        parsed, found = parse_row(number, entry)
        problems += found
        if parsed is None:
            continue
        if parsed.task_id in seen:
            twice = f"also on row {seen[parsed.task_id]}; keep one row per task"
            problems.append(RowProblem(number, parsed.task_id, "task_id", twice))
            continue
        seen[parsed.task_id] = number
        rows.append(parsed)
    return rows, problems


def parse_row(number: int, entry: Mapping[str, Any]) -> tuple[OldProgress | None, list[RowProblem]]:
    raw_id = entry.get("task_id")
    task_id = str(raw_id).strip() if isinstance(raw_id, str | int) and not isinstance(raw_id, bool) else ""
    problems: list[RowProblem] = []

    def problem(name: str, text: str) -> None:
        problems.append(RowProblem(number, task_id or None, name, text))

    for name in REQUIRED_FIELDS:
        if name not in entry:
            problem(name, "missing; export the old status endpoint's full task objects")
    if not task_id and "task_id" in entry:
        problem("task_id", f"{raw_id!r} is not a task id; put the old task's id")
    numbers: dict[str, int | None] = {}
    for name in ("total", "last_start_offset", "filtered_count", "produced_count"):
        try:
            numbers[name] = whole_number(entry.get(name))
        except ValueError as exc:
            problem(name, f"{exc}; put the number the old status endpoint showed")
    status = str(entry.get("status") or "").strip().lower()
    if "status" in entry and status not in OLD_STATUSES:
        known = ", ".join(OLD_STATUSES)
        problem("status", f"{entry.get('status')!r} is not one of the old service's statuses ({known})")
    if problems:
        return None, problems
    row = OldProgress(
        row=number,
        task_id=task_id,
        total=numbers["total"],
        last_start_offset=numbers["last_start_offset"],
        status=status,
        filtered_count=numbers["filtered_count"] or 0,
        produced_count=numbers["produced_count"] or 0,
    )
    return (None, found) if (found := row.state_problems(entry)) else (row, [])


def whole_number(value: Any) -> int | None:
    """A count or offset from JSON or CSV: an integer, or text of one (``"1200"``, ``"1,200"``, ``"1200.0"``);
    empty, ``null`` and ``None`` mean no value.

    :raises ValueError: naming the value, for anything else, a negative number or one beyond ``BIGINT_MAX``.
    """
    # reprlib: a value in a message is shown short, however long or deeply nested it is.
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{reprlib.repr(value)} is not a whole number")
    if isinstance(value, str):
        text = value.strip().replace(",", "").replace("_", "")
        if text.lower() in NULL_TEXTS:
            return None
        try:
            number = float(text) if "." in text else int(text)
        except ValueError:
            raise ValueError(f"{reprlib.repr(value)} is not a whole number") from None
    elif isinstance(value, int | float):
        number = value
    else:
        raise ValueError(f"{reprlib.repr(value)} is not a whole number")
    if isinstance(number, float) and not number.is_integer():
        raise ValueError(f"{reprlib.repr(value)} is not a whole number")
    if number < 0:
        raise ValueError(f"{reprlib.repr(value)} is negative")
    if number > BIGINT_MAX:
        raise ValueError(f"{reprlib.repr(value)} is out of range (at most {BIGINT_MAX})")
    return int(number)


@dataclass(frozen=True)
class CurrentProgress:
    """What ``crawler_ops.progress`` holds for a task now (absent: the task never committed a run)."""

    watermark: int | None
    total: int | None = None
    filtered_count: int = 0
    produced_count: int = 0


@dataclass(frozen=True)
class ImportStep:
    """What importing one old row does: ``action`` is ``set`` (watermark, total and counts from the old row),
    ``skip`` (the old service had no position for it) or ``refuse`` (``reason`` says why and what to do)."""

    old: OldProgress
    current: CurrentProgress
    action: str
    reason: str = ""

    @property
    def new_watermark(self) -> int | None:
        return self.old.last_start_offset if self.action == "set" else self.current.watermark

    def describe(self) -> str:
        old, cur = self.old, self.current
        head = f"{old.task_id}: watermark {show(cur.watermark)} -> {show(self.new_watermark)}"
        if self.action == "skip":
            return f"{head} (skipped: {self.reason})"
        counts = (
            f"total {show(cur.total)} -> {show(old.total)}, filtered {cur.filtered_count} -> {old.filtered_count}, "
            f"produced {cur.produced_count} -> {old.produced_count}"
        )
        line = f"{head}, {counts} (old status {old.status})"
        return f"{line}\n    REFUSED: {self.reason}" if self.action == "refuse" else line


def show(value: int | None) -> str:
    return "-" if value is None else str(value)


def plan_import(
    rows: Iterable[OldProgress],
    current: Mapping[str, CurrentProgress],
    running: Mapping[str, Sequence[str]],
    force: bool = False,
) -> list[ImportStep]:
    """One step per old row of a configured task.

    :param current: each task's stored progress (a task without a row never committed a run).
    :param running: the task's runs that planned from the stored watermark and have not committed yet.
    :param force: allow moving a stored watermark backwards (the offsets in between are crawled again).
    """
    steps = []
    for row in rows:
        now = current.get(row.task_id, CurrentProgress(None))
        if row.last_start_offset is None:
            reason = "the old service has no position for this task (it never crawled it); nothing to import"
            steps.append(ImportStep(row, now, "skip", reason))
        elif running.get(row.task_id):
            runs = ", ".join(running[row.task_id])
            reason = (
                f"run {runs} of this task planned from the current watermark and has not committed; wait until it "
                "finishes (or mark it failed in the Airflow UI), then import again"
            )
            steps.append(ImportStep(row, now, "refuse", reason))
        elif now.watermark is not None and row.last_start_offset < now.watermark and not force:
            reason = (
                f"moves the watermark back from {now.watermark} to {row.last_start_offset}, so offsets "
                f"[{row.last_start_offset}, {now.watermark}) would be crawled and published again; "
                "pass --force to do it"
            )
            steps.append(ImportStep(row, now, "refuse", reason))
        else:
            steps.append(ImportStep(row, now, "set"))
    return steps
