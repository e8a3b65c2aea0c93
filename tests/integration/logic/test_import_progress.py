"""``import-progress`` (crawler_ops.migration.import_progress) on PostgreSQL: a dry run writes nothing, an applied
import replaces each task's progress and records it as a run, and one row that cannot be imported writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from crawler_ops.config import LoadedConfig
from crawler_ops.hooks.store.hook import CrawlStoreHook
from crawler_ops.hooks.store.status_table import DONE
from crawler_ops.migration import import_progress as importing
from crawler_ops.migration.import_progress import ImportReport, import_progress
from crawler_ops.planning import Batch
from tests.integration.logic.conftest import DB_CONN
from tests.support import make_task

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def second(pg: psycopg.Connection[Any], crawler_schema: None, name: str) -> Iterator[str]:
    """Another task id of this test's own (sorting after ``task``), its rows removed afterwards."""
    other = f"{name}_z"
    yield other
    for table, column in (("progress", "task_id"), ("crawl_run", "task_id"), ("batch_status", "task_name")):
        pg.execute(f'DELETE FROM crawler_ops."{table}" WHERE "{column}" = %s', (other,))


def export(folder: Path, *rows: tuple[str, int | None]) -> Path:
    path = folder / "old.json"
    tasks = [
        {
            "task_id": task,
            "total": "1000",
            "last_start_offset": offset,
            "status": "stopped",
            "filtered_count": "850",
            "produced_count": "849",
        }
        for task, offset in rows
    ]
    path.write_text(json.dumps({"tasks": tasks}))
    return path


def progress(pg: psycopg.Connection[Any], task: str) -> tuple[Any, ...] | None:
    """(watermark, total, filtered, produced, status) of the task's progress row, None without one."""
    return pg.execute(
        "SELECT watermark, total, filtered_count, produced_count, status FROM crawler_ops.progress WHERE task_id = %s",
        (task,),
    ).fetchone()


def watermark(pg: psycopg.Connection[Any], task: str) -> int | None:
    found = progress(pg, task)
    return None if found is None else int(found[0])


def imports(pg: psycopg.Connection[Any], task: str) -> list[tuple[Any, ...]]:
    return pg.execute(
        "SELECT old_watermark, new_watermark, status, notes FROM crawler_ops.crawl_run "
        "WHERE task_id = %s AND mode = 'import'",
        (task,),
    ).fetchall()


def import_run(pg: psycopg.Connection[Any], task: str) -> tuple[Any, ...]:
    """(run_id, total, ref_time) of the task's last import run, and the run_id its progress row names."""
    run = pg.execute(
        "SELECT run_id, total, ref_time FROM crawler_ops.crawl_run WHERE task_id = %s AND mode = 'import' "
        "ORDER BY ref_time DESC LIMIT 1",
        (task,),
    ).fetchone()
    last = pg.execute("SELECT last_run_id FROM crawler_ops.progress WHERE task_id = %s", (task,)).fetchone()
    assert run is not None and last is not None
    return (*run, last[0])


@pytest.fixture
def other_database(
    pg: psycopg.Connection[Any], pg_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A second crawler database, empty (no crawler_ops schema), as the Airflow connection id it returns."""
    pg.execute(f'CREATE DATABASE "{name}"')
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", f"{pg_url.rsplit('/', 1)[0]}/{name}")
    yield name
    pg.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def loaded(*tasks: str, errors: dict[str, str] | None = None, databases: dict[str, str] | None = None) -> LoadedConfig:
    """The config of ``tasks``, each on the crawler database ``databases`` names for it (default: the stack's)."""
    on = databases or {}
    return LoadedConfig(
        tasks=tuple(make_task(t, postgres_conn_id=on.get(t, DB_CONN)) for t in tasks), errors=errors or {}
    )


def test_a_dry_run_plans_and_writes_nothing_and_apply_writes_each_task_and_its_record(
    pg, task, second, tmp_path, caplog
):
    store = CrawlStoreHook(DB_CONN, task)
    with store.transaction() as cur:
        store.batches.insert(cur, [Batch(0, 250), Batch(250, 500), Batch(500, 1000)], "old_run")
    store.close()
    pg.execute("UPDATE crawler_ops.batch_status SET status = %s WHERE task_name = %s AND id = 250", (DONE, task))
    path = export(tmp_path, (task, 500), (second, 300))
    dry = import_progress(path, loaded(task, second))
    assert dry.ok and not dry.applied
    assert [(s.old.task_id, s.action, s.new_watermark) for s in dry.steps] == [(task, "set", 500), (second, "set", 300)]
    assert progress(pg, task) is None and imports(pg, task) == []

    caplog.set_level("INFO", logger=importing.__name__)
    applied = import_progress(path, loaded(task, second), apply=True)
    assert applied.applied
    lines: list[str] = []
    applied.render(path, apply=True, echo=lines.append)
    assert lines[1:] == [
        f"  {applied.steps[0].describe()}",
        f"  {applied.steps[1].describe()}",
        "applied: 2 tasks' progress written (recorded as 'import' runs in crawler_ops.crawl_run)",
    ]
    assert progress(pg, task) == (500, 1000, 850, 849, "imported")
    assert progress(pg, second) == (300, 1000, 850, 849, "imported")
    [(old, new, status, [note])] = imports(pg, task)
    assert note in [r.getMessage() for r in caplog.records if r.name == importing.__name__]
    assert (old, new, status) == (None, 500, "success")
    assert "old.json, row 1, old status stopped" in note and note.endswith(
        "; batch rows below the new watermark dropped: 1 pending, 1 done"
    )
    run_id, total, ref_time, last_run_id = import_run(pg, task)
    assert run_id == f"import_progress__{ref_time.astimezone(UTC).isoformat()}" and run_id.endswith("+00:00")
    assert (total, last_run_id) == (1000, run_id), "the run's total; the progress row names the import run"
    assert [r[0] for r in pg.execute("SELECT id FROM crawler_ops.batch_status WHERE task_name = %s", (task,))] == [500]
    [(_, _, _, [note_2])] = imports(pg, second)
    assert "dropped" not in note_2

    dry_back = import_progress(export(tmp_path, (task, 100)), loaded(task))
    assert not dry_back.ok and "moves the watermark back from 500 to 100" in dry_back.steps[0].reason, "a dry run too"
    back = import_progress(export(tmp_path, (task, 100)), loaded(task), apply=True)
    assert not back.ok and not back.applied and "moves the watermark back from 500 to 100" in back.steps[0].reason
    assert watermark(pg, task) == 500
    forced = import_progress(export(tmp_path, (task, 100)), loaded(task), apply=True, force=True)
    assert forced.applied and watermark(pg, task) == 100
    runs = sorted((r[:2] for r in imports(pg, task)), key=lambda r: -r[1])
    assert runs == [(None, 500), (500, 100)], "each import run records the watermark it replaced"


def test_tasks_on_two_crawler_databases_are_imported_together_and_a_dry_run_creates_no_schema(
    pg, pg_url, task, second, other_database, tmp_path
):
    path = export(tmp_path, (task, 500), (second, 300))
    config = loaded(task, second, databases={task: other_database})
    with psycopg.connect(f"{pg_url.rsplit('/', 1)[0]}/{other_database}", autocommit=True) as other:
        dry = import_progress(path, config)
        assert [(s.old.task_id, s.action, s.new_watermark) for s in dry.steps] == [
            (task, "set", 500),
            (second, "set", 300),
        ]
        assert other.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'crawler_ops'").fetchone() is None
        assert import_progress(path, config, apply=True).applied
        assert other.execute("SELECT watermark FROM crawler_ops.progress WHERE task_id = %s", (task,)).fetchone() == (
            500,
        )
    assert progress(pg, task) is None and watermark(pg, second) == 300


def test_one_row_that_cannot_be_imported_writes_nothing_and_says_why(pg, task, second, tmp_path):
    path = export(tmp_path, (task, 600), (second, 300), ("not_configured_mut", 5))
    report = import_progress(path, loaded(task, errors={second: "bad schedule"}), apply=True)
    assert not report.applied and not report.ok
    assert [s.old.task_id for s in report.steps] == [task]
    assert report.problems == [
        (2, f"row 2 (task_id '{second}'): the task is in the config but invalid (bad schedule); fix the config first"),
        (3, report.problems[1][1]),
    ]
    assert report.problems[1][1].startswith("row 3 (task_id 'not_configured_mut'): no crawl task with this id in the ")
    assert report.problems[1][1].endswith("; add it under 'tasks:' with the old task's settings, or leave the row out")
    assert progress(pg, task) is None and imports(pg, task) == []


def test_a_task_the_old_service_never_crawled_is_skipped(pg, task, tmp_path):
    report = import_progress(export(tmp_path, (task, None)), loaded(task), apply=True)
    assert report.applied and [s.action for s in report.steps] == ["skip"]
    assert progress(pg, task) is None and imports(pg, task) == []


def test_an_open_run_record_blocks_the_import_while_airflow_runs_it(pg, task, tmp_path, monkeypatch, caplog):
    store = CrawlStoreHook(DB_CONN, task)
    with store.transaction() as cur:
        store.start_run(cur, "manual__live", "incremental", REF)
        store.start_run(cur, "manual__gone", "incremental", REF)
    store.close()
    dag_id = make_task(task).dag_id
    import crawler_ops.ops.status as status

    asked: list[list[str]] = []
    monkeypatch.setattr(status, "active_runs", lambda dags: (asked.append(dags), ({dag_id: ["manual__live"]}, None))[1])
    report = import_progress(export(tmp_path, (task, 600)), loaded(task), apply=True)
    assert not report.applied
    assert report.steps[0].action == "refuse" and report.steps[0].reason.startswith("run manual__live of this task")
    assert asked == [[dag_id]]
    monkeypatch.setattr(status, "active_runs", lambda dags: ({}, None))
    assert import_progress(export(tmp_path, (task, 600)), loaded(task), apply=True).applied
    monkeypatch.setattr(status, "active_runs", lambda dags: (None, "metadata DB down"))
    report = import_progress(export(tmp_path, (task, 700)), loaded(task), apply=True)
    assert not report.applied and "manual__gone" in report.steps[0].reason
    assert "import-progress: metadata DB down; every open run record counts as running" in caplog.messages


def test_the_report_says_what_happened(tmp_path):
    lines: list[str] = []
    path = tmp_path / "old.json"
    ImportReport().render(path, apply=False, echo=lines.append)
    assert lines == [
        f"import-progress {path}: 0 configured tasks [dry run]",
        "dry run: nothing written; run again with --apply to write this",
    ]
    lines.clear()
    ImportReport(problems=[(2, "row 2: b"), (1, "row 1: a")]).render(path, apply=True, echo=lines.append)
    assert lines == [
        f"import-progress {path}: 0 configured tasks",
        "2 rows cannot be imported:",
        "  row 1: a",
        "  row 2: b",
        "nothing written: fix or remove the rows above (or wait for the running crawls), then run again",
    ]
    lines.clear()
    ImportReport(applied=True).render(path, apply=True, echo=lines.append)
    assert lines[-1] == "applied: 0 tasks' progress written (recorded as 'import' runs in crawler_ops.crawl_run)"
    assert importing.count_by([2, 0, 2]) == {2: 2, 0: 1}
