"""The deployment files, checked without Docker: docker-compose.yaml against the Compose specification's schema,
the services the README names, the mounts the code needs, the image's Airflow version, and the connections."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from crawler_ops.config import load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text(encoding="utf-8"))


def test_the_compose_file_follows_the_compose_specification(compose):
    schema = json.loads((REPO / "dev" / "compose-spec.json").read_text(encoding="utf-8"))
    jsonschema.validate(compose, schema)


def test_every_service_the_readme_names_is_in_the_compose_file(compose):
    deploy = README.split("## Deploy", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([a-z-]+)` \|", deploy, flags=re.MULTILINE))
    assert named >= {"postgres", "redis", "kafka", "airflow-init", "airflow-worker"}, named
    assert named <= set(compose["services"]), named - set(compose["services"])


def test_airflow_services_mount_the_code_and_include_where_the_code_looks(compose):
    airflow = [s for name, s in compose["services"].items() if name.startswith("airflow-")]
    assert len(airflow) == 6
    for service in airflow:
        assert {"./dags:/opt/airflow/dags", "./plugins:/opt/airflow/plugins", "./include:/opt/airflow/include"} <= set(
            service["volumes"]
        )
        assert service["environment"]["CRAWLER_OPS_CONFIG"] == "/opt/airflow/include/crawler_tasks.yaml"
        assert service["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"


def test_the_statsd_exporter_reads_the_shipped_mapping(compose):
    exporter = compose["services"]["statsd-exporter"]
    mount = "./include/deploy/monitoring/statsd_mapping.yml:/etc/statsd-exporter/mapping.yml:ro"
    assert mount in exporter["volumes"]
    assert "--statsd.mapping-config=/etc/statsd-exporter/mapping.yml" in exporter["command"]
    assert (REPO / mount.split(":")[0]).is_file()


def test_the_image_is_the_pinned_airflow_release():
    pinned = re.search(r"^apache-airflow==([\d.]+)$", (REPO / "requirements.txt").read_text(), re.MULTILINE)
    base = re.search(r"^FROM apache/airflow:([\d.]+)-python3\.11$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert pinned and base and pinned.group(1) == base.group(1)


def test_the_connections_file_names_every_connection_the_sample_config_uses():
    loaded = load_config(REPO / "include" / "crawler_tasks.yaml")
    used = {t.source.conn_id for t in loaded.tasks} | {t.kafka.conn_id for t in loaded.tasks}
    used |= {t.postgres_conn_id for t in loaded.tasks} | {e.postgres_conn_id for e in loaded.executors}
    connections = json.loads((REPO / "include" / "deploy" / "connections.json").read_text(encoding="utf-8"))
    assert used and used <= set(connections), used - set(connections)


def test_every_setting_the_compose_file_requires_is_in_env_example(compose):
    text = (REPO / "docker-compose.yaml").read_text(encoding="utf-8")
    required = set(re.findall(r"\$\{(\w+):\?", text))
    example = set(re.findall(r"^(\w+)=", (REPO / ".env.example").read_text(), re.MULTILINE))
    assert required and required <= example, required - example


README = (REPO / "README.md").read_text(encoding="utf-8")
