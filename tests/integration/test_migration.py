"""Switching over from the old crawler service on the real stack: ``import-progress`` takes over the old service's
position (dry run first, then ``--apply``), refuses what would lose or repeat data, and the next crawl publishes
only the records the old service had not, compared with the demo source's ground truth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import cli, duplicates, make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REF = datetime(2026, 11, 1, tzinfo=UTC)


def old_status(folder: Path, name: str, *tasks: dict[str, Any]) -> Path:
    """An export of the old service's status endpoint: its task objects, numbers as text as some exports have them."""
    path = folder / name
    path.write_text(json.dumps({"tasks": list(tasks), "kafka_lag": {}, "running_count": 0}, ensure_ascii=False))
    return path


def old_task(task_id: str, last_start_offset: int, total: int = 1_000) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "task_name": "旧任务",
        "total": str(total),
        "last_start_offset": str(last_start_offset),
        "progress": "-",
        "status": "stopped",
        "last_update": "2026-11-30 08:00:00",
        "filtered_count": "850",
        "produced_count": "849",
        "is_running": False,
    }


def progress_row(pg_uri: str, task_id: str) -> tuple[Any, ...] | None:
    rows = query(
        pg_uri,
        "SELECT watermark, total, last_start_offset, status, filtered_count, produced_count "
        "FROM crawler_ops.progress WHERE task_id = %s",
        task_id,
    )
    return rows[0] if rows else None


def import_runs(pg_uri: str, task_id: str) -> list[tuple[Any, ...]]:
    return query(
        pg_uri,
        "SELECT old_watermark, new_watermark, status, notes FROM crawler_ops.crawl_run "
        "WHERE task_id = %s AND mode = 'import' ORDER BY started_at",
        task_id,
    )


def test_an_imported_position_is_where_the_next_crawl_resumes_and_only_newer_records_are_published(
    source, kafka_bootstrap, pg_uri, unique_id, tmp_path, use_config, run_dag
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    use_config(cfg)
    unknown = f"{unique_id}_gone"

    with_unknown = cli(
        "import-progress",
        str(old_status(tmp_path, "a.json", old_task(unique_id, 900), old_task(unknown, 5))),
        "--apply",
    )
    assert with_unknown.returncode == 1, with_unknown.stdout + with_unknown.stderr
    assert f"row 2 (task_id '{unknown}'): no crawl task with this id in the config" in with_unknown.stdout
    assert progress_row(pg_uri, unique_id) is None, "a file with a bad row writes nothing, not even the good rows"

    good = old_status(tmp_path, "b.json", old_task(unique_id, 900))
    dry = cli("import-progress", str(good))
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"{unique_id}: watermark - -> 900, total - -> 1000, filtered 0 -> 850, produced 0 -> 849" in dry.stdout
    assert "dry run: nothing written" in dry.stdout
    assert progress_row(pg_uri, unique_id) is None and import_runs(pg_uri, unique_id) == []

    applied = cli("import-progress", str(good), "--apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert progress_row(pg_uri, unique_id) == (900, 1_000, 900, "imported", 850, 849)
    [(before, after, status, [note])] = import_runs(pg_uri, unique_id)
    assert (before, after, status) == (None, 900, "success")
    assert "progress imported from the old crawler service (b.json, row 1, old status stopped)" in note

    backwards = cli("import-progress", str(old_status(tmp_path, "c.json", old_task(unique_id, 500))), "--apply")
    assert backwards.returncode == 1
    assert "REFUSED: moves the watermark back from 900 to 500" in backwards.stdout and "--force" in backwards.stdout
    assert watermark(pg_uri, unique_id) == 900 and len(import_runs(pg_uri, unique_id)) == 1

    source.append(unique_id, 300)
    source.clear_requests(unique_id)
    assert run_dag(cfg, REF) == "success"

    assert min(r["offset"] for r in source.page_requests(unique_id)) == 900, "nothing below the imported watermark"
    assert watermark(pg_uri, unique_id) == 1_300
    assert run_record(pg_uri, unique_id)["mode"] == "incremental"
    published = read_topic(kafka_bootstrap, cfg.kafka.topic)
    in_window = set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])
    newer = {r["id"] for r in source.records(unique_id, 900, 400)} & in_window
    older = {r["id"] for r in source.records(unique_id, 0, 900)}
    assert {m.key for m in published} == newer, "every newer record in the window, and nothing the old service sent"
    assert not {m.key for m in published} & older and not duplicates(published)
    assert {int(m.headers["source_offset"]) for m in published} <= set(range(900, 1_300))

    forced = cli(
        "import-progress", str(old_status(tmp_path, "d.json", old_task(unique_id, 1_200, 1_300))), "--apply", "--force"
    )
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert watermark(pg_uri, unique_id) == 1_200
    assert [(b, a) for b, a, _, _ in import_runs(pg_uri, unique_id)] == [(None, 900), (1_300, 1_200)]


def test_the_old_shape_transform_publishes_the_old_job_data_with_the_task_id_inside(
    source, kafka_bootstrap, unique_id, run_dag
):
    from crawler_ops.transforms import OLD_JOB_FIELDS

    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, transform="crawler_ops.transforms.old_job_data")

    assert run_dag(cfg, REF) == "success"

    served = source.records(unique_id, 0, 200)
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert len(messages) == 200
    for message in messages:
        record = served[int(message.headers["source_offset"])]
        assert message.key == record["id"] and message.headers["crawl_task"] == unique_id
        assert message.value == {**{name: record.get(name) for name in OLD_JOB_FIELDS}, "task_id": unique_id}


@pytest.mark.slow
def test_an_import_is_refused_while_a_run_of_the_task_is_between_its_plan_and_its_commit(
    source, source_proxy, pg_uri, unique_id, tmp_path, use_config
):
    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_chunks=1, source={"conn_id": source_proxy.conn_id})
    use_config(cfg)
    # `airflow dags test` in its own process, on this checkout's DAGs and plugins: a real DAG run Airflow knows.
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    source_proxy.hold(lambda _path, params: "offset" in params and params.get("limit") != "1")
    run = subprocess.Popen(
        [airflow, "dags", "test", cfg.dag_id, REF.isoformat()],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        source_proxy.wait_held(1, timeout=240)  # planned (the run record is open), its chunk waits for a page

        refused = cli("import-progress", str(old_status(tmp_path, "a.json", old_task(unique_id, 900))), "--apply")

        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "REFUSED: run manual__" in refused.stdout and "has not committed" in refused.stdout
        assert import_runs(pg_uri, unique_id) == []
    finally:
        source_proxy.release()
        output = run.communicate(timeout=300)[0]
    assert run.returncode == 0, output[-3000:]
    assert watermark(pg_uri, unique_id) == 1_000, "the run committed what it crawled, untouched by the import"


def test_a_run_record_left_open_by_a_run_airflow_no_longer_runs_does_not_block_the_import(
    source, pg_uri, unique_id, tmp_path, use_config
):
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import plan_run

    source.create(unique_id, total=1_000, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    use_config(cfg)
    plan_run(RunContext(cfg=cfg, run_id="abandoned-run", ref=REF, params=RunParams()))  # planned, never committed
    assert run_record(pg_uri, unique_id)["status"] == "running"

    applied = cli("import-progress", str(old_status(tmp_path, "a.json", old_task(unique_id, 900))), "--apply")

    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert watermark(pg_uri, unique_id) == 900
    rows = query(pg_uri, "SELECT id, hi FROM crawler_ops.batch_status WHERE task_name = %s ORDER BY id", unique_id)
    assert rows and all(lo >= 900 for lo, _ in rows), "the planned rows below the imported watermark are dropped"
    [(_, _, _, [note])] = import_runs(pg_uri, unique_id)
    assert "batch rows below the new watermark dropped" in note
