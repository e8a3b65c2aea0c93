"""A transform from config, and `airflow dags test` from the command line with and without -c."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawler_ops.transforms import JOB_FIELDS
from tests.support import DemoSource, create_topic, done_batches, make_task, query, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def test_the_transform_shapes_each_published_value_from_its_source_record(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, transform="crawler_ops.transforms.job_posting")

    assert run_dag(cfg, REF) == "success"

    served = source.records(unique_id, 0, 300)
    run_id = run_record(pg_uri, unique_id)["run_id"]
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert sorted(int(m.headers["source_offset"]) for m in messages) == list(range(300))
    for message in messages:
        record = served[int(message.headers["source_offset"])]
        assert message.key == record["id"]
        assert message.value == {name: record[name] for name in JOB_FIELDS}, "the source's values, description dropped"
        assert (message.headers["crawl_task"], message.headers["run_id"]) == (unique_id, run_id)
    assert "description" in served[0] and watermark(pg_uri, unique_id) == 300


def test_a_transform_that_cannot_be_imported_fails_the_run_and_publishes_nothing(
    source, kafka_bootstrap, pg_uri, unique_id, run_dag
):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, transform="crawler_ops.transforms.no_such_transform", retries=1)

    assert run_dag(cfg, REF) == "failed"

    assert source.page_requests(unique_id) == [], "no page fetched for a chunk that cannot transform"
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []
    assert done_batches(pg_uri, unique_id) == {} and watermark(pg_uri, unique_id) == 0
    assert run_record(pg_uri, unique_id)["status"] == "failed"


def test_a_transform_that_cannot_be_imported_is_named_in_the_run_record(source, pg_uri, unique_id, run_dag):
    source.create(unique_id, total=300, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, transform="crawler_ops.transforms.no_such_transform")

    assert run_dag(cfg, REF) == "failed"

    record = run_record(pg_uri, unique_id)
    assert "transform 'crawler_ops.transforms.no_such_transform' cannot be imported" in json.dumps(record["errors"])


def airflow_dags_test(dag_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    airflow = str(Path(sys.executable).parent / "airflow")
    return subprocess.run(
        [airflow, "dags", "test", dag_id, *args], env=dict(os.environ), capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_airflow_dags_test_cli_with_and_without_conf(
    source_url, kafka_bootstrap, pg_uri, unique_id, tmp_path, use_config
):
    source = DemoSource(source_url)
    source.create(unique_id, total=400, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)
    use_config(cfg)
    create_topic(kafka_bootstrap, cfg.kafka.topic)  # a dry run creates no topic: read an existing one

    dry = airflow_dags_test(cfg.dag_id, REF.isoformat(), "-c", json.dumps({"dry_run": True}))
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []
    assert query(pg_uri, "SELECT count(*) FROM crawler_ops.crawl_run WHERE task_id = %s", unique_id) == [(0,)]

    real = airflow_dags_test(cfg.dag_id, REF.isoformat())
    assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-3000:]
    assert len(read_topic(kafka_bootstrap, cfg.kafka.topic)) == 400
    assert run_record(pg_uri, unique_id)["status"] == "success"
    assert watermark(pg_uri, unique_id) == 400

    bad = airflow_dags_test(cfg.dag_id, REF.isoformat(), "-c", json.dumps({"max_batches": 0}))
    assert bad.returncode != 0
    assert "max_batches" in bad.stdout + bad.stderr
