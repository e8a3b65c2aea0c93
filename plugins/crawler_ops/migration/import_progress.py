"""``python -m crawler_ops import-progress FILE [--apply] [--force]``: take over the old crawler service's position.

Each configured task named in the old status export gets the old ``last_start_offset`` as its watermark and the
old total and counts, so its next run crawls only what the old service had not. A dry run (the default) reads and
prints the plan; ``--apply`` writes it. All tasks of one crawler database are written in one transaction, under
each task's planning lock with its progress row locked, and only when every row of the file is importable: a
refused or bad row writes nothing. Each import is recorded as a run of mode ``import`` in ``crawler_ops.crawl_run``
with a note saying what changed, so the status view and the run history show it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from crawler_ops.config import CrawlTaskConfig, LoadedConfig, config_path
from crawler_ops.hooks.store.db import CrawlerDbHook, Cursor
from crawler_ops.hooks.store.progress_import import RUN_MODE, ProgressImportHook
from crawler_ops.hooks.store.status_table import STATUS_NAMES
from crawler_ops.migration.old_status import CurrentProgress, ImportStep, OldProgress, plan_import, read_old_status

log = logging.getLogger(__name__)


class RolledBack(Exception):
    """Raised inside the import's transactions to roll them back (a dry run, or a row that cannot be imported)."""


@dataclass
class ImportReport:
    """What an import found and did: the plan per task and every problem, each a line an operator can act on."""

    steps: list[ImportStep] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)
    applied: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems and all(step.action != "refuse" for step in self.steps)

    def render(self, path: Path, apply: bool, echo: Callable[[str], None]) -> None:
        """This report's plan, then the problems, then what happened."""
        echo(f"import-progress {path}: {len(self.steps)} configured tasks" + (" [dry run]" if not apply else ""))
        for step in self.steps:
            echo(f"  {step.describe()}")
        if self.problems:
            echo(f"{len(self.problems)} rows cannot be imported:")
            for _, problem in sorted(self.problems):
                echo(f"  {problem}")
        if self.applied:
            written = sum(step.action == "set" for step in self.steps)
            echo(f"applied: {written} tasks' progress written (recorded as '{RUN_MODE}' runs in crawler_ops.crawl_run)")
        elif not self.ok:
            echo("nothing written: fix or remove the rows above (or wait for the running crawls), then run again")
        elif not apply:
            echo("dry run: nothing written; run again with --apply to write this")


def import_progress(path: Path, loaded: LoadedConfig, apply: bool = False, force: bool = False) -> ImportReport:
    """Plan (and with ``apply`` write) the import of the old status export at ``path`` for the tasks of ``loaded``.

    :raises ImportFileError: when the file cannot be read as a status export at all.
    :raises StatusTableError: when PostgreSQL cannot be reached.
    """
    rows, row_problems = read_old_status(path)
    report = ImportReport(problems=[(p.row, p.describe()) for p in row_problems])
    tasks = {task.id: task for task in loaded.tasks}
    for row in rows:
        if row.task_id in loaded.errors:
            problem = f"the task is in the config but invalid ({loaded.errors[row.task_id]}); fix the config first"
            report.problems.append((row.row, f"row {row.row} (task_id {row.task_id!r}): {problem}"))
        elif row.task_id not in tasks:
            problem = (
                f"no crawl task with this id in the config ({config_path()}); add it under 'tasks:' with the old "
                "task's settings, or leave the row out"
            )
            report.problems.append((row.row, f"row {row.row} (task_id {row.task_id!r}): {problem}"))
    known = [row for row in rows if row.task_id in tasks]
    by_database: dict[str, list[OldProgress]] = defaultdict(list)
    for row in known:
        by_database[tasks[row.task_id].postgres_conn_id].append(row)
    stamp = datetime.now(UTC)
    cursors: dict[str, Cursor] = {}
    try:
        with ExitStack() as transactions:
            for conn_id, group in sorted(by_database.items()):
                cursors[conn_id] = transactions.enter_context(open_transaction(conn_id))
                report.steps += plan_on(cursors[conn_id], conn_id, group, tasks, apply, force)
            report.steps.sort(key=lambda step: step.old.row)
            if not apply or not report.ok:
                raise RolledBack
            for step in report.steps:
                task = tasks[step.old.task_id]
                if step.action == "set":
                    record_import(cursors[task.postgres_conn_id], step, task, path, stamp)
            report.applied = True
    except RolledBack:
        pass
    return report


@contextmanager
def open_transaction(conn_id: str) -> Iterator[Cursor]:
    """A transaction on the crawler database ``conn_id``; its connection is closed when it ends."""
    hook = CrawlerDbHook(conn_id, "import-progress")
    try:
        with hook.transaction() as cur:
            yield cur
    finally:
        hook.close()


def plan_on(
    cur: Cursor,
    conn_id: str,
    rows: Sequence[OldProgress],
    tasks: Mapping[str, CrawlTaskConfig],
    apply: bool,
    force: bool,
) -> list[ImportStep]:
    """Lock the tasks of one crawler database (in id order, so two imports cannot deadlock), read their progress
    and open runs, and plan. A dry run creates nothing: without the schema every task is new."""
    hooks = {row.task_id: ProgressImportHook(conn_id, row.task_id) for row in rows}
    first = next(iter(hooks.values()))
    if apply:
        first.ensure_schema(cur)
    elif not first.schema_exists(cur):
        return plan_import(rows, {}, {}, force)
    current: dict[str, CurrentProgress] = {}
    open_runs: dict[str, list[str]] = {}
    for task_id in sorted(hooks):
        hook = hooks[task_id]
        hook.lock(cur)
        stored = hook.progress_locked(cur)
        if stored is not None:
            current[task_id] = CurrentProgress(**stored)
        open_runs[task_id] = hook.open_runs(cur)
    return plan_import(rows, current, still_running(open_runs, tasks), force)


def still_running(open_runs: Mapping[str, list[str]], tasks: Mapping[str, CrawlTaskConfig]) -> dict[str, list[str]]:
    """The open run records whose DAG run is still queued or running in Airflow. Asked while the tasks are locked,
    so no run can plan in between; when Airflow's metadata DB cannot be read here, every open record counts."""
    with_open = {task_id: runs for task_id, runs in open_runs.items() if runs}
    if not with_open:
        return {}
    from crawler_ops.ops.status import active_runs  # imports Airflow's ORM: only when a record is open

    active, error = active_runs([tasks[task_id].dag_id for task_id in with_open])
    if active is None:
        log.warning("import-progress: %s; every open run record counts as running", error)
        return with_open
    return {
        task_id: [run for run in runs if run in active.get(tasks[task_id].dag_id, [])]
        for task_id, runs in with_open.items()
    }


def record_import(cur: Cursor, step: ImportStep, task: CrawlTaskConfig, path: Path, stamp: datetime) -> None:
    """Write one task's imported progress and its record in the run history."""
    hook = ProgressImportHook(task.postgres_conn_id, task.id)
    old, watermark = step.old, step.old.last_start_offset
    assert watermark is not None  # a 'set' step always has the old position
    run_id = f"import_progress__{stamp.isoformat()}"
    dropped = hook.import_progress(cur, run_id, watermark, old.total, old.filtered_count, old.produced_count)
    note = (
        f"task {task.id}: progress imported from the old crawler service ({path.name}, row {old.row}, old status "
        f"{old.status}) by import-progress: {step.describe()}"
    )
    if dropped:
        counts = ", ".join(f"{n} {STATUS_NAMES.get(s, s)}" for s, n in sorted(count_by(dropped).items()))
        note += f"; batch rows below the new watermark dropped: {counts}"
    hook.record_import(cur, run_id, stamp, total=old.total, old=step.current.watermark, new=watermark, note=note)
    log.info("%s", note)


def count_by(values: Sequence[int]) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for value in values:
        counts[value] += 1
    return dict(counts)
