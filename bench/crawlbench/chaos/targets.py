"""The services a chaos scenario may break, private to the chaos run so the shared stack is never disturbed: a
single Kafka broker, a 3-node Kafka cluster (``dev/kafka_cluster.py``) and an embedded PostgreSQL, each on free
loopback ports chosen before Airflow starts, started only when a scenario needs them."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from crawlbench.common import BenchError
from crawlbench.environment import devstack

if TYPE_CHECKING:
    from kafka_cluster import KafkaCluster

PG_START_S = 60


class PrivatePostgres:
    """An embedded PostgreSQL server (the stack's, see ``dev/pg_server.py``) with its own data folder, port and
    password.

    :param home: its folder (the password file; data and log too unless run as root).
    :param port: the loopback port it listens on.
    """

    def __init__(self, home: Path, port: int) -> None:
        from pg_server import EmbeddedPostgres  # dev/ is on the path once crawlbench.environment is imported

        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.server = EmbeddedPostgres(home, port)
        self.port = port

    @property
    def uri(self) -> str:
        return self.server.uri(devstack.PG_DATABASE)

    def start(self) -> None:
        """Initialise the data folder once, start the server (crash recovery after a kill) and create the DB."""
        from pg_server import PostgresError

        try:
            self.server.prepare()
            self.server.start(max_connections=100, timeout_s=PG_START_S)
        except PostgresError as exc:
            raise BenchError(f"private PostgreSQL did not start: {exc}") from exc
        devstack.ensure_database(self.server.uri("postgres"), devstack.PG_DATABASE)

    def postmaster(self) -> psutil.Process | None:
        with contextlib.suppress(OSError, ValueError, IndexError, psutil.NoSuchProcess):
            return psutil.Process(int((self.server.data / "postmaster.pid").read_text().splitlines()[0]))
        return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend, as a machine crash would: no shutdown, no checkpoint."""
        master = self.postmaster()
        if master is None:
            raise BenchError(f"private PostgreSQL on port {self.port} is not running")
        members = [master, *master.children(recursive=True)]
        for member in members:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.send_signal(signal.SIGKILL)
        psutil.wait_procs(members, timeout=10)

    def stop(self) -> None:
        if self.postmaster() is not None:
            self.server.stop("immediate")

    def remove(self) -> None:
        """Stop the server and delete its data, wherever it lives."""
        self.stop()
        self.server.remove()


def kafka_cluster(home: Path, nodes: int) -> KafkaCluster:
    """A cluster's nodes and ports, fixed now; nothing runs until ``up()``."""
    from kafka_cluster import KafkaCluster  # dev/ is on the path once crawlbench.environment is imported

    return KafkaCluster(home, nodes)


def kafka_conn(bootstrap: str) -> str:
    """An Airflow connection (JSON, for ``AIRFLOW_CONN_<ID>``) to the Kafka at ``bootstrap``."""
    return json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}})


def wait_leaders(cluster: KafkaCluster, topic: str, timeout: float = 60.0) -> dict[int, int]:
    """The leader of each partition of ``topic``, once every partition has one."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    while time.monotonic() < deadline:
        info = admin.list_topics(topic, timeout=10).topics.get(topic)
        if info is not None and info.error is None and all(p.leader >= 0 for p in info.partitions.values()):
            return {p: meta.leader for p, meta in info.partitions.items()}
        time.sleep(0.5)
    raise BenchError(f"topic {topic} has partitions without a leader after {timeout:.0f}s")
