"""The deployment files, checked without Docker: docker-compose.yaml against the Compose specification's schema and
against what a running stack needs (one secret set, Kafka's data on its volume, one image build, the code baked in),
the Dockerfiles, constraints.txt, the env file generator, and docs/deploy.md. `make compose-test` runs the same
files under a real Docker engine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cryptography.fernet import Fernet

from crawler_ops.config import load_config

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
import constraints  # noqa: E402  (dev/constraints.py, the generator and staleness check of constraints.txt)

COMPOSE_TEXT = (REPO / "docker-compose.yaml").read_text(encoding="utf-8")
DEPLOY_DOC = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
SECRETS = ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY")
CODE = ("/opt/airflow/dags", "/opt/airflow/plugins", "/opt/airflow/include")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_TEXT)


def airflow_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if name.startswith("airflow-") or name == "flower"}


def required(text: str) -> set[str]:
    return set(re.findall(r"\$\{(\w+):\?", text))


def test_the_compose_file_follows_the_compose_specification(compose):
    schema = json.loads((REPO / "dev" / "compose-spec.json").read_text(encoding="utf-8"))
    jsonschema.validate(compose, schema)
    dev = yaml.safe_load((REPO / "docker-compose.dev.yaml").read_text(encoding="utf-8"))
    jsonschema.validate(dev, schema)


def test_every_airflow_component_gets_the_same_required_jwt_secret_api_key_and_fernet_key(compose):
    services = airflow_services(compose)
    assert {"airflow-apiserver", "airflow-scheduler", "airflow-worker", "airflow-init", "airflow-cli"} <= set(services)
    for name, service in services.items():
        for key in SECRETS:
            value = service["environment"].get(key, "")
            assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", value), f"{name}: {key} is {value!r}, not a required setting"
    for key in SECRETS:
        assert len({s["environment"][key] for s in services.values()}) == 1, f"{key} differs between services"


def test_kafka_keeps_its_data_on_its_volume_with_a_fixed_cluster_id(compose):
    kafka = compose["services"]["kafka"]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in kafka["volumes"]}
    assert kafka["environment"].get("KAFKA_LOG_DIRS") == mounts["kafka-data"]
    assert "kafka-data" in compose["volumes"]
    assert re.fullmatch(r"\$\{KAFKA_CLUSTER_ID:-[A-Za-z0-9_-]{22}\}", kafka["environment"]["CLUSTER_ID"])


def test_kafka_advertises_an_internal_listener_to_containers_and_a_published_one_to_the_host(compose):
    env = compose["services"]["kafka"]["environment"]
    listeners = dict(re.match(r"(\w+)://(.*)", x).groups() for x in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(re.match(r"(\w+)://(.*)", x).groups() for x in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["PLAINTEXT"] == "kafka:9092" and listeners["PLAINTEXT"] == ":9092"
    host_port = listeners["HOST"].rsplit(":", 1)[1]
    published = compose["services"]["kafka"]["ports"]
    assert [p for p in published if p.endswith(f":{host_port}")], published
    outside = published[0].rsplit(":", 1)[0].rsplit(":", 1)[1]  # the host port of "bind:host:container"
    assert advertised["HOST"].endswith(":" + outside), (advertised["HOST"], outside)
    assert env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].count(":") == 3


def test_the_airflow_image_is_built_once_and_every_airflow_service_runs_it(compose):
    builders = {name: s["build"] for name, s in compose["services"].items() if "build" in s}
    airflow = {name: b for name, b in builders.items() if name in airflow_services(compose)}
    assert airflow == {"airflow-init": "."}, builders
    assert "build" not in compose["x-airflow-common"]
    images = {s["image"] for s in airflow_services(compose).values()}
    assert images == {"${AIRFLOW_IMAGE_NAME:-crawler-ops-airflow:latest}"}


def test_the_code_is_baked_into_the_image_and_mounted_only_by_the_opt_in_dev_file(compose):
    for name, service in compose["services"].items():
        targets = {v.split(":")[1] for v in service.get("volumes", [])}
        assert not targets & set(CODE), f"{name} mounts code over the image"
    assert not (REPO / "docker-compose.override.yaml").exists(), "compose would load it on a production host"
    dev = yaml.safe_load((REPO / "docker-compose.dev.yaml").read_text(encoding="utf-8"))
    for name in airflow_services(compose):
        assert {f".{c.removeprefix('/opt/airflow')}:{c}" for c in CODE} <= set(dev["services"][name]["volumes"]), name
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    for folder in ("dags", "plugins", "include"):
        assert f"COPY --chown=airflow:root {folder}/ /opt/airflow/{folder}/" in dockerfile


def test_airflow_init_waits_for_the_database_with_a_deadline_and_fails_loudly(compose):
    script = (REPO / "include" / "deploy" / "airflow-init.sh").read_text(encoding="utf-8")
    wait, migrate = script.index("until error=$(airflow db check"), script.index("airflow db migrate")
    assert wait < migrate
    loop = script[wait:migrate]
    assert "exit 1" in loop and "DB_WAIT_S" in loop and ">&2" in loop
    assert compose["services"]["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_airflow_cli_and_flower_are_there_under_profiles_as_in_airflows_file(compose):
    assert compose["services"]["airflow-cli"]["profiles"] == ["debug"]
    assert compose["services"]["flower"]["profiles"] == ["flower"]
    assert compose["services"]["flower"]["command"] == "celery flower"
    assert "flower" in constraints.parse((REPO / "constraints.txt").read_text(encoding="utf-8"))


def test_the_build_context_leaves_out_the_venv_the_stack_git_and_secrets():
    ignored = set((REPO / ".dockerignore").read_text(encoding="utf-8").split())
    assert {".venv", ".stack", ".git", ".env", "dev/kafka/lib"} <= ignored


def test_the_demo_source_image_installs_what_its_server_asks_uvicorn_for():
    main = (REPO / "dev" / "demo_source" / "__main__.py").read_text(encoding="utf-8")
    wanted = {"uvicorn", "msgspec", *re.findall(r'(?:loop|http)="(\w+)"', main)}
    assert {"uvloop", "httptools"} <= wanted
    dockerfile = (REPO / "dev" / "demo_source" / "Dockerfile").read_text(encoding="utf-8")
    installed = constraints.parse(re.search(r"pip install .*", dockerfile).group(0).replace(" ", "\n"))
    assert wanted <= set(installed), wanted - set(installed)
    pinned = constraints.parse((REPO / "constraints.txt").read_text(encoding="utf-8"))
    assert {name: pinned[name] for name in installed} == installed


def test_the_image_installs_under_constraints_that_are_not_stale():
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    install = r"pip install [^\n]*-r /opt/crawler-ops/requirements.txt\s*\\\n\s*-c /opt/crawler-ops/constraints.txt"
    assert re.search(install, dockerfile)
    pinned = constraints.parse((REPO / "constraints.txt").read_text(encoding="utf-8"))
    assert constraints.problems(pinned, constraints.installed()) == []


def test_a_stale_constraints_file_is_caught():
    pinned = constraints.parse((REPO / "constraints.txt").read_text(encoding="utf-8"))
    environment = constraints.installed()
    assert constraints.problems({**pinned, "httpx": "0.0.1"}, environment)
    assert constraints.problems(pinned, {**environment, "left-pad": "1.0"})


def test_the_image_is_the_pinned_airflow_release():
    pinned = re.search(r"^apache-airflow==([\d.]+)$", (REPO / "requirements.txt").read_text(), re.MULTILINE)
    base = re.search(r"^FROM apache/airflow:([\d.]+)-python3\.11$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert pinned and base and pinned.group(1) == base.group(1)


def test_the_stand_in_images_carry_the_names_the_compose_file_and_dockerfiles_use(compose):
    engine = (REPO / "dev" / "compose" / "engine.sh").read_text(encoding="utf-8")
    built = set(re.findall(r'^\w+_IMAGE="([^"]+)"', engine, re.MULTILINE))
    used = {re.sub(r"\$\{\w+:-([^}]+)\}", r"\1", s["image"]) for s in compose["services"].values() if "build" not in s}
    used -= {"prom/statsd-exporter:v0.28.0", "crawler-ops-airflow:latest"}  # profile metrics; built by compose
    for dockerfile in (REPO / "Dockerfile", REPO / "dev" / "demo_source" / "Dockerfile"):
        used |= set(re.findall(r"^FROM (\S+)", dockerfile.read_text(encoding="utf-8"), re.MULTILINE))
    assert used <= built, used - built


def test_make_env_generates_every_required_secret_and_keeps_them_on_a_second_run(tmp_path):
    output = tmp_path / ".env"
    make_env = [sys.executable, str(REPO / "include" / "deploy" / "make_env.py"), "--output", str(output)]
    subprocess.run(make_env, check=True, capture_output=True)
    values = dict(line.split("=", 1) for line in output.read_text().splitlines() if re.match(r"^\w+=", line))
    assert required(COMPOSE_TEXT) <= {name for name, value in values.items() if value}
    Fernet(values["AIRFLOW_FERNET_KEY"].encode())  # a valid key, or this raises
    assert output.stat().st_mode & 0o077 == 0
    subprocess.run([*make_env, "--set", "AIRFLOW_PORT=28080"], check=True, capture_output=True)
    again = dict(line.split("=", 1) for line in output.read_text().splitlines() if re.match(r"^\w+=", line))
    assert again == {**values, "AIRFLOW_PORT": "28080"}


def test_every_setting_the_compose_file_requires_is_in_env_example(compose):
    example = set(re.findall(r"^(\w+)=", (REPO / ".env.example").read_text(), re.MULTILINE))
    assert required(COMPOSE_TEXT) and required(COMPOSE_TEXT) <= example, required(COMPOSE_TEXT) - example


def test_every_service_the_deploy_doc_names_is_in_the_compose_file(compose):
    named = set(re.findall(r"^\| `([a-z-]+)` \|", DEPLOY_DOC, flags=re.MULTILINE))
    assert named >= {"postgres", "redis", "kafka", "airflow-init", "airflow-worker", "airflow-cli"}, named
    assert named <= set(compose["services"]), named - set(compose["services"])


def test_the_statsd_exporter_reads_the_shipped_mapping(compose):
    exporter = compose["services"]["statsd-exporter"]
    mount = "./include/deploy/monitoring/statsd_mapping.yml:/etc/statsd-exporter/mapping.yml:ro"
    assert mount in exporter["volumes"]
    assert "--statsd.mapping-config=/etc/statsd-exporter/mapping.yml" in exporter["command"]
    assert (REPO / mount.split(":")[0]).is_file()


def test_the_connections_file_names_every_connection_the_sample_config_uses():
    loaded = load_config(REPO / "include" / "crawler_tasks.yaml")
    used = {t.source.conn_id for t in loaded.tasks} | {t.kafka.conn_id for t in loaded.tasks}
    used |= {t.postgres_conn_id for t in loaded.tasks} | {e.postgres_conn_id for e in loaded.executors}
    used |= {t.kafka.registry_conn_id for t in loaded.tasks}  # for a task that turns on a registry value format
    connections = json.loads((REPO / "include" / "deploy" / "connections.json").read_text(encoding="utf-8"))
    assert used and used <= set(connections), used - set(connections)


def test_the_readme_points_to_the_deploy_docs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    deploy = readme.split("## Deploy", 1)[1].split("\n## ", 1)[0]
    assert "docs/deploy.md" in deploy and "docs/zh/deploy.md" in deploy
    chinese = readme.split("## 中文快速上手", 1)[1].split("\n## ", 1)[0]
    assert "docs/zh/deploy.md" in chinese


def test_compose_test_without_its_engine_keeps_the_engine_docker_host_names(monkeypatch):
    sys.path.insert(0, str(REPO / "dev" / "compose"))
    import compose_test  # dev/compose/compose_test.py, on the path just above

    asked: list[list[str]] = []

    def engine_env(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="export DOCKER_HOST=unix:///run/own/docker.sock\n")

    monkeypatch.setattr(compose_test.subprocess, "run", engine_env)
    assert compose_test.docker_host(True, "tcp://10.0.0.5:2375") == "tcp://10.0.0.5:2375"
    assert asked == [], "an engine the user named is not replaced by engine.sh's"
    assert compose_test.docker_host(True, None) == "unix:///run/own/docker.sock"
    assert compose_test.docker_host(False, "tcp://10.0.0.5:2375") == "unix:///run/own/docker.sock", (
        "without --no-engine the test runs on the engine engine.sh started"
    )
