"""A crawl DAG written by hand from the package's steps (tests/dags/hand_written/crawl_by_hand.py) runs with
``dag.test()`` on the real stack: it crawls, commits, announces, and its own task reads the run summary.

``dag.test()`` runs a DAG that a DAG bundle holds: the test adds the DAG file's folder as a second bundle for its
duration, and deletes the DAG from the metadata DB afterwards. The DAG is paused at creation, so a scheduler still
running from another test never queues its task instances while ``dag.test()`` runs them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawler_ops.operators import ANNOUNCE, COMMIT, CRAWL_CHUNK, PLAN
from tests.dags.hand_written.crawl_by_hand import build_crawl_by_hand
from tests.support import make_task, read_topic, run_record, watermark

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
FOLDER = Path(__file__).resolve().parents[1] / "dags" / "hand_written"
LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"


@pytest.fixture
def hand_written_bundle(monkeypatch: pytest.MonkeyPatch, unique_id: str) -> Iterator[str]:
    """The folder of the hand-written DAG file as the bundle ``hand-written``, its DAG for task ``unique_id``."""
    bundles = [
        {"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}},
        {"name": "hand-written", "classpath": LOCAL_BUNDLE, "kwargs": {"path": str(FOLDER), "refresh_interval": 0}},
    ]
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(bundles))
    monkeypatch.setenv("CRAWLER_OPS_HAND_WRITTEN_TASK", unique_id)
    dag_id = f"by_hand_{unique_id}"
    yield dag_id
    from airflow.api.common.delete_dag import delete_dag

    delete_dag(dag_id, keep_records_in_log=False)


def test_a_hand_written_crawl_dag_crawls_commits_and_announces(
    source, kafka_bootstrap, pg_uri, unique_id, use_config, hand_written_bundle
):
    source.create(unique_id, total=500, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, max_chunks=2, min_batches_per_chunk=1)
    use_config(cfg, "tasks")

    dagrun = build_crawl_by_hand(cfg).test(logical_date=REF, run_conf={})

    states = {(ti.task_id, ti.map_index): str(ti.state) for ti in dagrun.get_task_instances()}
    assert str(dagrun.state) == "success", states
    assert states == {
        (PLAN, -1): "success",
        (CRAWL_CHUNK, 0): "success",
        (CRAWL_CHUNK, 1): "success",
        (COMMIT, -1): "success",
        (ANNOUNCE, -1): "success",
        ("report", -1): "success",
    }
    labels = sorted(ti.rendered_map_index for ti in dagrun.get_task_instances() if ti.task_id == CRAWL_CHUNK)
    assert labels == ["offsets 0-200", "offsets 200-500"], "each chunk instance is labelled by its offsets"
    assert watermark(pg_uri, unique_id) == 500
    assert len({m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}) == 500
    record = run_record(pg_uri, unique_id)
    assert (record["mode"], record["status"], record["published"]) == ("first", "success", 500)
