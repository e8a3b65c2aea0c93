"""The stack's Kafka: the broker jars (fetched once with Maven), a KRaft node's properties and storage, and the
single broker ``dev/stack.py up`` starts. ``kafka_cluster.py`` builds its N-node clusters from the same parts."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from stack_common import REPO, STACK, Ports, StackError, log, port_open, reused, spawn, wait_until

KAFKA_DIR = REPO / "dev" / "kafka"


def new_cluster_id() -> str:
    """A KRaft cluster id (a UUID in URL-safe base64) that does not start with '-': the storage tool's argument
    parser would take one that does for an option (1 fresh stack in 64 failed to format before this)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def kafka_classpath() -> str:
    lib = KAFKA_DIR / "lib"
    if not any(lib.glob("kafka_2.13-*.jar")):
        if shutil.which("mvn") is None:
            raise StackError("Maven is needed once to fetch the Kafka jars from Maven Central: apt-get install maven")
        log("kafka: fetching broker jars from Maven Central (once; cached in ~/.m2 and dev/kafka/lib)")
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(KAFKA_DIR / "pom.xml"), "package"],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise StackError(f"mvn could not fetch the Kafka jars:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return str(lib / "*")


def java_cmd() -> str:
    java = shutil.which("java")
    if java is None:
        raise StackError(
            "Java 17 or newer is needed for the local Kafka broker: apt-get install openjdk-17-jre-headless"
        )
    return java


def kafka_ready(port: int | str) -> bool:
    """Whether the broker on ``port`` (or a cluster's bootstrap servers) serves metadata."""
    bootstrap = port if isinstance(port, str) else f"127.0.0.1:{port}"
    if isinstance(port, int) and not port_open(port):
        return False
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - any error means "not ready yet" during start-up polling
        return False
    return True


def write_kafka_properties(
    props: Path, node_id: int, port: int, controller_port: int, data: Path, voters: str | None, replicas: int
) -> Path:
    """A KRaft node's server.properties: broker and controller; ``voters`` the quorum (default: this node
    alone); internal topics replicated ``replicas`` times with ``min.insync.replicas`` one less (at least 1)."""
    data.mkdir(parents=True, exist_ok=True)
    template = (KAFKA_DIR / "server.properties.in").read_text()
    values = {
        "@NODE_ID@": str(node_id),
        "@VOTERS@": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "@PORT@": str(port),
        "@CONTROLLER_PORT@": str(controller_port),
        "@DATA_DIR@": str(data),
        "@AUTO_CREATE@": os.environ.get("CRAWLER_OPS_KAFKA_AUTO_CREATE", "false"),
        "@REPLICATION@": str(replicas),
        "@MIN_ISR@": str(max(1, replicas - 1)),
    }
    for key, value in values.items():
        template = template.replace(key, value)
    props.write_text(template)
    return props


def kafka_jvm(java: str, classpath: str) -> list[str]:
    return [
        java,
        "-Xmx384m",
        "-Xms64m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={KAFKA_DIR / 'log4j2.properties'}",
        "-cp",
        classpath,
    ]


def format_kafka_storage(jvm: list[str], data: Path, props: Path, cluster_id: str) -> None:
    """Format a node's log directory once (every node of a cluster with the same ``cluster_id``)."""
    if (data / "meta.properties").exists():
        return
    command = [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")


def start_kafka(ports: Ports) -> None:
    if reused("kafka", lambda: kafka_ready(ports.kafka), f"127.0.0.1:{ports.kafka}"):
        return
    java, classpath = java_cmd(), kafka_classpath()
    data = STACK / "kafka" / "data"
    props = write_kafka_properties(
        STACK / "kafka" / "server.properties", 1, ports.kafka, ports.kafka_controller, data, voters=None, replicas=1
    )
    jvm = kafka_jvm(java, classpath)
    format_kafka_storage(jvm, data, props, new_cluster_id())
    started = time.monotonic()
    pid = spawn("kafka", [*jvm, "kafka.Kafka", str(props)])
    wait_until("kafka", pid, lambda: kafka_ready(ports.kafka), timeout=90)
    log(f"kafka: started (pid {pid}) on 127.0.0.1:{ports.kafka} in {time.monotonic() - started:.1f}s")
