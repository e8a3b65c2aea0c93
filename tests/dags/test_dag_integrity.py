"""The generated DAGs import cleanly, carry the expected settings, and bad config stays visible."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import BundleDagBag
from airflow.sdk import TriggerRule
from airflow.sdk.exceptions import AirflowFailException

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
SAMPLE = REPO / "include" / "crawler_tasks.yaml"


def load_bag(monkeypatch: pytest.MonkeyPatch, config: Path) -> BundleDagBag:
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    return BundleDagBag(dag_folder=str(DAGS), bundle_path=str(DAGS))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing must not touch the network (source, Kafka, PostgreSQL): any connect fails the test."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("network access at DAG parse time")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def test_sample_config_dags_import_without_errors_or_network(monkeypatch, no_network):
    bag = load_bag(monkeypatch, SAMPLE)

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {
        "crawl_jobs_beijing",
        "crawl_jobs_shanghai",
        "exec_area_addresses",
        "crawler_ops_maintenance",
        "sample_jobs_beijing_downstream",
    }


@pytest.mark.parametrize("dag_id", ["crawl_jobs_beijing", "crawl_jobs_shanghai"], ids=["beijing", "shanghai"])
def test_crawl_dag_has_the_production_settings(monkeypatch, dag_id):
    dag = load_bag(monkeypatch, SAMPLE).get_dag(dag_id)

    assert dag.max_active_runs == 1
    assert {"crawler_ops", "crawl"} <= set(dag.tags)
    assert dag.doc_md and "Params" in dag.doc_md
    assert set(dag.params.keys()) == {"reset", "dry_run", "max_batches", "filter_days", "replay_from", "replay_to"}
    assert {t.task_id for t in dag.tasks} == {"plan", "crawl_chunk", "commit", "announce"}
    for t in dag.tasks:
        assert t.retries == 2
        assert t.execution_timeout is not None
    assert dag.get_task("commit").trigger_rule == TriggerRule.ALL_DONE
    assert dag.get_task("crawl_chunk").max_active_tis_per_dagrun == 4
    assert dag.catchup is False


def test_only_the_dag_being_run_is_built_when_a_task_starts(monkeypatch):
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "crawl_jobs_shanghai")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "plan")

    assert set(load_bag(monkeypatch, SAMPLE).dag_ids) == {"crawl_jobs_shanghai"}


def test_an_invalid_task_becomes_a_failing_dag_and_the_valid_one_still_loads(monkeypatch, tmp_path):
    config = tmp_path / "tasks.yaml"
    config.write_text(
        "tasks:\n"
        "  - id: good\n    kafka: {topic: good.topic}\n"
        "  - id: bad\n    batch_size: 0\n    kafka: {topic: bad.topic}\n",
        encoding="utf-8",
    )
    bag = load_bag(monkeypatch, config)

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"crawl_good", "crawl_bad", "crawler_ops_maintenance"}
    broken = bag.get_dag("crawl_bad")
    assert "config-error" in broken.tags
    with pytest.raises(AirflowFailException, match=r"task 'bad': field 'batch_size'"):
        broken.get_task("config_error").python_callable()


def test_invalid_yaml_is_an_import_error_naming_the_file(monkeypatch, tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("tasks: [ {id: a, kafka: {topic: x}\n", encoding="utf-8")

    errors = load_bag(monkeypatch, config).import_errors

    assert {Path(f).name for f in errors} == {
        "crawl_dags.py",
        "executor_dags.py",
        "maintenance_dag.py",
        "sample_downstream.py",
    }
    assert all(f"{config} is not valid YAML" in message for message in errors.values())


def test_maintenance_dag_has_three_independent_pruning_tasks(monkeypatch, no_network):
    dag = load_bag(monkeypatch, SAMPLE).get_dag("crawler_ops_maintenance")

    assert {t.task_id for t in dag.tasks} == {"prune_run_history", "prune_errors", "prune_status_rows"}
    assert all(not t.upstream_task_ids for t in dag.tasks)
    assert {"crawler_ops", "maintenance"} <= set(dag.tags)
    assert "30 days" in dag.doc_md


def test_an_invalid_maintenance_block_becomes_a_failing_dag(monkeypatch, tmp_path):
    config = tmp_path / "tasks.yaml"
    config.write_text(
        "tasks:\n  - id: good\n    kafka: {topic: good.topic}\nmaintenance: {keep_runs_days: -1}\n", encoding="utf-8"
    )
    bag = load_bag(monkeypatch, config)

    assert set(bag.dag_ids) == {"crawl_good", "crawler_ops_maintenance"}
    broken = bag.get_dag("crawler_ops_maintenance")
    assert "config-error" in broken.tags
    with pytest.raises(AirflowFailException, match=r"maintenance: field 'keep_runs_days'"):
        broken.get_task("config_error").python_callable()


def test_crawl_dag_announces_the_topic_asset_after_the_commit(monkeypatch):
    dag = load_bag(monkeypatch, SAMPLE).get_dag("crawl_jobs_beijing")

    announce = dag.get_task("announce")
    assert [o.uri for o in announce.outlets] == ["kafka://kafka_default/jobs.beijing"]
    assert announce.upstream_task_ids == {"commit"} and not dag.get_task("commit").outlets
