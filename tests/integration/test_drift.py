"""Field drift on the real services: a run's new, missing and retyped fields, found against the fields the task's
earlier successful runs published, in its run record (``crawl_run``), the status view and the success webhook."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crawler_ops.ops.status import stored_status
from tests.support import make_task, query, read_topic, run_record, verified

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
DEMO_FIELDS = ("id", "aae397", "Collect_time", "title", "company", "city", "salary", "education", "description")


def test_a_run_reports_new_missing_and_retyped_fields_in_its_record_the_status_view_and_the_webhook(
    source, receiver, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, notify={"conn_id": f"hook_{unique_id}"})

    assert run_dag(cfg, REF) == "success"

    first = run_record(pg_uri, unique_id)
    assert first["drift"]["baseline"] is True, "the first run establishes the baseline"
    assert (first["drift"]["new"], first["drift"]["missing"], first["drift"]["retyped"]) == ([], [], [])
    # 3 pages of 100 records, the first 20 of each profiled: every demo field a string in each
    assert first["drift_sampled"] == first["drift"]["sampled_records"] == 60
    assert first["drift_profile"] == {name: {"string": 60} for name in DEMO_FIELDS}

    # The source starts sending a new field, stops sending one and changes the type of another.
    source.faults(unique_id, set_fields={"remote": True, "salary": 12000}, drop_fields=["education"])
    source.append(unique_id, 150)
    assert run_dag(cfg, REF + timedelta(hours=1)) == "success"

    second = run_record(pg_uri, unique_id)
    drift = second["drift"]
    sampled = second["drift_sampled"]
    assert second["published"] == 150 and sampled == drift["sampled_records"] == 40  # pages [450, 550), [400, 450)
    assert drift["baseline"] is False
    assert drift["new"] == [{"field": "remote", "types": {"boolean": sampled}, "sampled_records": sampled}]
    assert drift["missing"] == [
        {"field": "education", "baseline_types": ["string"], "baseline_records": 60, "baseline_sampled_records": 60}
    ]
    assert drift["retyped"] == [{"field": "salary", "from": ["string"], "to": "integer", "sampled_records": sampled}]
    assert drift["summary"] == (
        f"drift: new field remote (boolean, {sampled} sampled records); missing field education (string; in 60 of "
        f"60 baseline records); retyped salary string→integer ({sampled} sampled records)"
    )
    # What was profiled is what consumers read.
    published = [m for m in read_topic(kafka_bootstrap, cfg.kafka.topic) if m.value.get("remote") is True]
    assert len(published) == 150 and all(isinstance(m.value["salary"], int) for m in published)

    view = stored_status(cfg)["drift"]
    assert view == {"run_id": second["run_id"], "status": "success", "finished_at": view["finished_at"], **drift}

    success: list[dict[str, Any]] = [verified(r) for r in receiver.requests]
    assert [body["event"] for body in success] == ["run.success", "run.success"]
    assert success[0]["summary"]["drift"] == first["drift"]
    assert success[1]["summary"]["drift"] == drift

    ((baseline,),) = query(pg_uri, "SELECT profile FROM crawler_ops.field_baseline WHERE task_id = %s", unique_id)
    assert baseline["sampled_records"] == 100
    assert baseline["fields"]["remote"] == {"boolean": 40}
    assert baseline["fields"]["salary"] == {"string": 60, "integer": 40}


def test_a_repeated_commit_reports_the_same_drift_and_adds_to_the_baseline_once(source, pg_uri, unique_id, run_dag):
    from crawler_ops.crawl.run import RunContext, RunParams
    from crawler_ops.crawl.steps import commit_run

    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    source.faults(unique_id, set_fields={"remote": "yes"})
    source.append(unique_id, 100)
    later = REF + timedelta(hours=1)
    assert run_dag(cfg, later) == "success"
    record = run_record(pg_uri, unique_id)
    assert record["drift"]["new"] == [{"field": "remote", "types": {"string": 20}, "sampled_records": 20}]

    again = commit_run(RunContext(cfg=cfg, run_id=record["run_id"], ref=later, params=RunParams()), [], [])

    assert again.drift == record["drift"] == run_record(pg_uri, unique_id)["drift"]
    ((baseline,),) = query(pg_uri, "SELECT profile FROM crawler_ops.field_baseline WHERE task_id = %s", unique_id)
    assert baseline["sampled_records"] == 60 and baseline["fields"]["remote"] == {"string": 20}


def test_a_failed_run_reports_its_drift_but_leaves_the_baseline_to_successful_runs(source, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    assert run_dag(cfg, REF) == "success"
    source.faults(unique_id, set_fields={"remote": 1}, fail_offsets=[250])
    source.append(unique_id, 200)  # batch [300, 400) is published, [200, 300) fails

    assert run_dag(cfg, REF + timedelta(hours=1)) == "failed"

    failed = run_record(pg_uri, unique_id)
    assert failed["status"] == "failed" and failed["published"] == 100
    assert failed["drift"]["new"] == [{"field": "remote", "types": {"integer": 20}, "sampled_records": 20}]
    ((baseline,),) = query(pg_uri, "SELECT profile FROM crawler_ops.field_baseline WHERE task_id = %s", unique_id)
    assert "remote" not in baseline["fields"] and baseline["sampled_records"] == 40

    source.faults(unique_id, set_fields={"remote": 1})
    assert run_dag(cfg, REF + timedelta(hours=2)) == "success"

    retried = run_record(pg_uri, unique_id)
    assert retried["published"] == 100, "the failed batch"
    assert retried["drift"]["new"] == [{"field": "remote", "types": {"integer": 20}, "sampled_records": 20}], (
        "still new: no successful run published it before"
    )
    ((baseline,),) = query(pg_uri, "SELECT profile FROM crawler_ops.field_baseline WHERE task_id = %s", unique_id)
    assert "remote" in baseline["fields"]


def test_a_feed_run_profiles_its_pages_too(source, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=250, ref=REF, in_window_share=1.0, feed={"next": "cursor"})
    feed = {"paginator": {"type": "cursor", "cursor_path": "data.next_cursor"}, "page_path": "/api/{task}/feed"}
    cfg = make_task(unique_id, max_chunks=1, source={**feed, "count_path": None}, drift_sample=30)

    assert run_dag(cfg, REF) == "success"

    record = run_record(pg_uri, unique_id)
    assert record["published"] == 250 and record["drift"]["baseline"] is True
    # pages of 100, 100 and 50 records, the first 30 of each profiled
    assert record["drift_sampled"] == 90 and record["drift"]["sample_per_page"] == 30
    assert record["drift_profile"] == {name: {"string": 90} for name in DEMO_FIELDS}
