"""Dataset names for lineage: OpenLineage's Kafka naming, the source's HTTP naming, the topic Asset's default host."""

from __future__ import annotations

import json

import pytest

from crawler_ops.config import KafkaConfig
from crawler_ops.lineage import (
    DatasetName,
    asset_dataset,
    env_bootstrap_servers,
    http_dataset,
    kafka_dataset,
    kafka_server,
)


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ("broker:9093", "broker:9093"),
        ("broker-1:9093,broker-2:9093", "broker-1:9093"),
        (" broker ", "broker:9092"),
        ("PLAINTEXT://broker:19092,SSL://other:9094", "broker:19092"),
        ("[::1]:9092", "[::1]:9092"),
        ("SASL_SSL://broker:9093", "broker:9093"),
        ("sasl_plaintext://broker.example:9094,b2:9094", "broker.example:9094"),
    ],
    ids=["host-port", "first-of-list", "default-port", "protocol-prefix", "ipv6", "sasl-ssl", "sasl-plaintext"],
)
def test_the_kafka_server_is_the_first_bootstrap_server_with_its_port(servers, expected):
    assert kafka_server(servers) == expected


def test_a_topic_is_named_by_the_bootstrap_server_and_the_topic():
    assert kafka_dataset("10.0.0.5:9092,10.0.0.6:9092", "jobs.beijing") == DatasetName(
        "kafka://10.0.0.5:9092", "jobs.beijing"
    )


@pytest.mark.parametrize("servers", ["", " , ", ":9092"], ids=["empty", "only-commas", "no-host"])
def test_bootstrap_servers_without_a_host_are_refused(servers):
    with pytest.raises(ValueError, match="bootstrap"):
        kafka_server(servers)


def test_the_topic_asset_uri_splits_into_the_dataset_the_kafka_provider_gives_openlineage():
    assert asset_dataset("kafka://broker:9092/jobs.beijing") == DatasetName("kafka://broker:9092", "jobs.beijing")
    assert asset_dataset("kafka://broker:9092/jobs.beijing") == kafka_dataset("broker:9092", "jobs.beijing")
    with pytest.raises(ValueError, match="not a kafka://"):
        asset_dataset("kafka://broker:9092/")


@pytest.mark.parametrize(
    ("base", "path", "expected"),
    [
        ("http://127.0.0.1:18080", "/api/jobs/list", ("http://127.0.0.1:18080", "/api/jobs/list")),
        ("https://api.example.com", "/api/jobs/list", ("https://api.example.com:443", "/api/jobs/list")),
        ("http://api.example.com", "api/jobs/list", ("http://api.example.com:80", "/api/jobs/list")),
        ("HTTPS://api.example.com:8443/v2/", "/jobs", ("https://api.example.com:8443", "/v2/jobs")),
        ("https://user:secret@api.example.com/v2", "/jobs", ("https://api.example.com:443", "/v2/jobs")),
    ],
    ids=["host-port", "https-default-port", "http-default-port-relative-path", "base-path", "no-credentials"],
)
def test_the_source_is_named_by_scheme_host_port_and_the_page_path(base, path, expected):
    assert http_dataset(base, path) == DatasetName(*expected)


def test_a_source_url_that_is_not_http_is_refused():
    with pytest.raises(ValueError, match="not an http"):
        http_dataset("ftp://files.example.com", "/x")


@pytest.mark.parametrize(
    "value",
    [
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "b1:9093,b2:9093"}}),
        json.dumps({"conn_type": "kafka", "extra": json.dumps({"bootstrap.servers": "b1:9093,b2:9093"})}),
        "kafka://?bootstrap.servers=b1%3A9093%2Cb2%3A9093",
    ],
    ids=["json", "json-extra-as-string", "uri"],
)
def test_the_bootstrap_servers_of_a_connection_defined_in_the_environment(value):
    assert env_bootstrap_servers("kafka_main", {"AIRFLOW_CONN_KAFKA_MAIN": value}) == "b1:9093,b2:9093"


def test_a_connection_not_in_the_environment_or_without_servers_gives_none():
    assert env_bootstrap_servers("kafka_main", {}) is None
    assert env_bootstrap_servers("kafka_main", {"AIRFLOW_CONN_KAFKA_MAIN": '{"conn_type": "kafka"}'}) is None


def test_the_topic_asset_uses_the_bootstrap_server_of_an_environment_connection(airflow_connection):
    airflow_connection("kafka_main", conn_type="kafka", extra={"bootstrap.servers": "b1:9093,b2:9093"})

    cfg = KafkaConfig(conn_id="kafka_main", topic="jobs")

    assert cfg.asset_uri == "kafka://b1:9093/jobs"
    assert asset_dataset(cfg.asset_uri) == kafka_dataset("b1:9093,b2:9093", "jobs")


def test_asset_host_overrides_the_bootstrap_server(airflow_connection):
    airflow_connection("kafka_main", conn_type="kafka", extra={"bootstrap.servers": "b1:9093"})

    assert KafkaConfig(conn_id="kafka_main", topic="jobs", asset_host="kafka.prod:9092").asset_uri == (
        "kafka://kafka.prod:9092/jobs"
    )


def test_without_the_connection_in_the_environment_the_asset_host_is_the_connection_id():
    # Parsing reads no metadata DB or secrets backend: the running task warns when the two differ.
    assert KafkaConfig(conn_id="kafka_main", topic="jobs").asset_uri == "kafka://kafka_main/jobs"


@pytest.mark.parametrize(
    "value",
    ["{bad json", '{"conn_type": "kafka", "extra": "not json"}', '{"conn_type": "kafka", "extra": 5}'],
    ids=["not-json", "extra-not-json", "extra-not-an-object"],
)
def test_a_connection_variable_that_does_not_read_leaves_the_asset_host_the_connection_id(monkeypatch, value):
    # DAG parsing must still build the DAG; the task reports the bad connection when it connects.
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_MAIN", value)
    assert KafkaConfig(conn_id="kafka_main", topic="jobs").asset_uri == "kafka://kafka_main/jobs"
