"""The OpenLineage datasets a crawl step reports, from connections defined in the environment (no services)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from airflow.sdk import DAG, BaseOperator

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.factory.crawl import build_crawl_dag
from crawler_ops.lineage import DatasetName
from crawler_ops.operators.crawl import CrawlChunkOperator
from crawler_ops.operators.lineage import CrawlLineage, ReportsLineage, report_lineage


@pytest.fixture
def cfg(airflow_connection) -> CrawlTaskConfig:
    airflow_connection("src", conn_type="http", schema="https", host="api.example.com", port=8443, login="u")
    airflow_connection("kafka_main", conn_type="kafka", extra={"bootstrap.servers": "b1:9093,b2:9093"})
    return CrawlTaskConfig.model_validate(
        {
            "id": "jobs",
            "source": {"conn_id": "src", "task": "postings", "page_path": "/v1/{task}/page"},
            "kafka": {"conn_id": "kafka_main", "topic": "jobs.topic"},
        }
    )


class Step(ReportsLineage, BaseOperator):
    def execute(self, context):
        pass


def step_operator() -> Step:
    with DAG("lineage_unit", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        Step(task_id="step")
    operator = dag.task_dict["step"]
    assert isinstance(operator, Step)
    return operator


def named(datasets) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


def test_a_publishing_step_reads_the_source_pages_and_writes_the_topic(cfg):
    operator = step_operator()
    report_lineage({"task": operator}, CrawlLineage(cfg, publishes=True))  # type: ignore[typeddict-item]

    lineage = operator.get_openlineage_facets_on_complete(None)

    assert lineage is not None
    assert named(lineage.inputs) == [("https://api.example.com:8443", "/v1/postings/page")]
    assert named(lineage.outputs) == [("kafka://b1:9093", "jobs.topic")]


def test_a_dry_run_step_writes_no_dataset(cfg):
    inputs, outputs = CrawlLineage(cfg, publishes=False).datasets()

    assert named(inputs) == [("https://api.example.com:8443", "/v1/postings/page")] and outputs == []


def test_a_step_that_reported_nothing_gives_openlineage_nothing():
    assert step_operator().get_openlineage_facets_on_complete(None) is None


def test_an_asset_that_names_another_host_than_the_connection_is_warned_about(cfg, caplog):
    explicit = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"asset_host": "old-broker:9092"})})

    with caplog.at_level(logging.WARNING, logger="crawler_ops.operators.lineage"):
        _, outputs = CrawlLineage(explicit, publishes=True).datasets()

    assert named(outputs) == [("kafka://b1:9093", "jobs.topic")], "lineage names the connection's server"
    assert "set kafka.asset_host: b1:9093" in caplog.text and "kafka://old-broker:9092/jobs.topic" in caplog.text
    assert "kafka.asset_host names another server" in caplog.text


def test_a_connection_the_parse_could_not_see_is_named_in_the_warning(cfg, caplog, monkeypatch):
    # Parsing saw no AIRFLOW_CONN_KAFKA_MAIN (the connection lives in the metadata DB); the running task reads it.
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_MAIN")
    monkeypatch.setattr(CrawlLineage, "topic", lambda self: DatasetName("kafka://b1:9093", "jobs.topic"))

    with caplog.at_level(logging.WARNING, logger="crawler_ops.operators.lineage"):
        CrawlLineage(cfg, publishes=True).datasets()

    assert cfg.kafka.asset_uri == "kafka://kafka_main/jobs.topic"
    assert "connection kafka_main is not in the environment" in caplog.text and "asset_host: b1:9093" in caplog.text


def test_an_asset_on_the_bootstrap_server_is_not_warned_about(cfg, caplog):
    with caplog.at_level(logging.WARNING, logger="crawler_ops.operators.lineage"):
        CrawlLineage(cfg, publishes=True).datasets()

    assert cfg.kafka.asset_uri == "kafka://b1:9093/jobs.topic" and caplog.text == ""


def test_the_crawl_dag_runs_its_chunks_as_the_lineage_operator(cfg):
    chunk = build_crawl_dag(cfg).task_dict["crawl_chunk"]

    assert chunk.operator_class is CrawlChunkOperator  # type: ignore[attr-defined]
    assert issubclass(CrawlChunkOperator, ReportsLineage)
