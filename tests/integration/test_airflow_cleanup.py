"""A test session's DAGs leave Airflow's metadata DB at its end: a DAG created with ``dag.test()`` is gone with its
run, task instances and serialized versions after the cleanup, and a configured DAG written alongside it stays."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from airflow import settings

from crawler_ops.config import broken_dag_id, load_config
from crawler_ops.factory.crawl import build_crawl_dags
from tests.airflow_cleanup import clean_metadata_db, configured_dag_ids, last_run_id, session_dag_ids

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def rows_of(dag_id: str) -> dict[str, int]:
    """The metadata DB's rows for ``dag_id`` in the tables the UI lists DAGs and runs from."""
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return {
            model.__tablename__: int(session.scalar(select(func.count()).where(model.dag_id == dag_id)) or 0)
            for model in (DagModel, SerializedDagModel, DagRun, TaskInstance)
        }


def test_a_dag_a_test_created_is_gone_after_the_cleanup_and_configured_dags_stay(
    stack, unique_id, tmp_path, monkeypatch
):
    config = tmp_path / "tasks.yaml"
    # No topic: the task is invalid, so its DAG is the placeholder whose only task fails at once.
    config.write_text(yaml.safe_dump({"tasks": [{"id": unique_id, "kafka": {}}]}), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(REPO / "dags"))
    dag_id = broken_dag_id(unique_id)
    runs_before = last_run_id()
    assert str(build_crawl_dags(load_config(config))[dag_id].test().state) == "failed"
    created = rows_of(dag_id)
    assert all(created.values()), created
    assert rows_of("crawler_ops_maintenance")["dag"] == 1, "dag.test() wrote the maintenance DAG of the folder too"

    candidates = session_dag_ids(tmp_path)
    assert {dag_id, "crawler_ops_maintenance"} <= candidates
    report = clean_metadata_db(candidates | {"crawl_jobs_beijing"}, configured_dag_ids(), tmp_path, runs_before)

    assert report.failures == []
    assert dag_id in report.deleted
    assert rows_of(dag_id) == dict.fromkeys(created, 0)
    assert {"crawler_ops_maintenance", "crawl_jobs_beijing"} <= set(report.kept_configured)
    kept = rows_of("crawler_ops_maintenance")  # other sessions on the shared stack may add runs meanwhile
    assert (kept["dag"], kept["serialized_dag"] > 0) == (1, True)
