"""include/deploy/helm/values.yaml: every key it uses exists in the values schema of the chart version it names,
and it wires what crawler_ops needs (secrets from Kubernetes Secrets, the chart's own StatsD, the crawler database,
no demo-only connection). The schema is the chart's own values.schema.json, put at dev/helm/values.schema.json by
dev/helm/chart_schema.sh from the chart package; without it the schema checks are skipped, the others run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VALUES_FILE = REPO / "include" / "deploy" / "helm" / "values.yaml"
SCHEMA_FILE = REPO / "dev" / "helm" / "values.schema.json"


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return yaml.safe_load(VALUES_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    if not SCHEMA_FILE.exists():
        pytest.skip("dev/helm/values.schema.json missing: run dev/helm/chart_schema.sh (docs/deploy.md, Helm)")
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def unknown_keys(value: Any, node: dict[str, Any], root: dict[str, Any], path: str = "") -> Iterator[str]:
    """Key paths of ``value`` that the schema does not declare (a mapping's keys, recursively)."""
    node = resolve(node, root)
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        here = f"{path}.{key}" if path else key
        if key in node.get("properties", {}):
            yield from unknown_keys(item, node["properties"][key], root, here)
        elif isinstance(node.get("additionalProperties"), dict):
            yield from unknown_keys(item, node["additionalProperties"], root, here)
        elif node.get("additionalProperties") is not True and "properties" in node:
            yield here
        elif "properties" not in node and "additionalProperties" not in node:
            yield here  # a leaf of the schema given a mapping


def test_the_values_file_names_the_chart_version_its_schema_comes_from(schema):
    version = re.search(r"official Helm chart, version ([\d.]+)", VALUES_FILE.read_text(encoding="utf-8"))
    assert version, "the header names no chart version"
    assert schema["properties"]["airflowVersion"]["default"].startswith("3."), "not a chart that ships Airflow 3"


def test_every_key_of_the_values_file_is_in_the_charts_schema(values, schema):
    assert list(unknown_keys(values, schema, schema)) == []
    jsonschema.validate(values, schema)


def test_a_key_the_chart_does_not_know_is_caught(values, schema):
    wrong = {**values, "statsd": {**values["statsd"], "host": "statsd"}, "workerReplicas": 2}
    assert sorted(unknown_keys(wrong, schema, schema)) == ["statsd.host", "workerReplicas"]


def test_statsd_goes_to_the_charts_own_statsd_service(values):
    assert values["statsd"]["enabled"] is True
    metrics = values["config"]["metrics"]
    assert metrics["statsd_host"] == '{{ printf "%s-statsd" (include "airflow.fullname" .) }}'
    assert int(metrics["statsd_port"]) == 9125


def test_secrets_come_from_kubernetes_secrets_and_no_demo_connection_is_needed(values):
    for key in ("fernetKeySecretName", "apiSecretKeySecretName", "jwtSecretName"):
        assert values[key], key
    assert "fernetKey" not in values and "jwtSecret" not in values
    assert "secretRef" in values["extraEnvFrom"]
    assert not re.search(r"AIRFLOW_CONN_DEMO|demo_source", yaml.safe_dump(values), re.IGNORECASE)


def test_the_migration_job_creates_the_crawler_database_and_the_pools(values):
    script = " ".join(values["migrateDatabaseJob"]["args"])
    steps = ["airflow db migrate", "create_crawler_db.py", "crawler-ops pools --apply"]
    assert all(step in script for step in steps) and script.index(steps[0]) < script.index(steps[1])
    assert (REPO / "include" / "deploy" / "create_crawler_db.py").is_file()
    assert values["createUserJob"]["enabled"] is False


def test_a_triggerer_runs_with_the_same_capacity_as_in_the_compose_file(values):
    """Watched tasks and deferred chunks need a triggerer that holds them all, on Kubernetes as with compose."""
    compose = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
    setting = compose["x-airflow-common"]["environment"]["AIRFLOW__TRIGGERER__CAPACITY"]
    assert setting == "${AIRFLOW_TRIGGERER_CAPACITY:-1000}"
    assert values["triggerer"]["enabled"] is True and values["triggerer"]["replicas"] >= 1
    assert values["config"]["triggerer"]["capacity"] == 1000
