"""A local Apache Kafka cluster in KRaft mode: N nodes, each broker and controller, from the same Maven jars as the
stack's single broker. Internal topics are replicated on every node (up to 3) with ``min.insync.replicas`` one
less, so the cluster keeps accepting ``acks=all`` writes with one node down and refuses them with two down.

Used by ``dev/stack.py up --kafka-brokers 3`` (``start_kafka_cluster`` below, in ``.stack/kafka-cluster``) and by
the tests that kill brokers. Each node has its own folder ``<home>/node<i>`` (data, server.properties), log
``<logs>/kafka-node<i>.log`` and pid file ``<run>/kafka-node<i>.pid``.

    .venv/bin/python dev/kafka_cluster.py up --home /tmp/kc --nodes 3     # prints the bootstrap servers
    .venv/bin/python dev/kafka_cluster.py down --home /tmp/kc
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kafka_server import (
    format_kafka_storage,
    java_cmd,
    kafka_classpath,
    kafka_jvm,
    new_cluster_id,
    write_kafka_properties,
)
from stack_common import STACK, StackError, free_port, log, log_tail, pid_alive, spawn, stop_pid


@dataclass(frozen=True)
class Node:
    node_id: int
    port: int
    controller_port: int

    @property
    def name(self) -> str:
        return f"kafka-node{self.node_id}"


class KafkaCluster:
    """The nodes of a local cluster, started, killed and restarted one by one.

    :param home: the cluster's folder (node data, properties, logs, pid files, the node ports).
    :param nodes: how many nodes (used when the cluster is new; an existing one keeps its nodes and ports).
    """

    def __init__(self, home: Path, nodes: int = 3) -> None:
        self.home = home
        self.logs, self.run = home / "logs", home / "run"
        for folder in (self.logs, self.run):
            folder.mkdir(parents=True, exist_ok=True)
        saved = home / "nodes.json"
        if saved.exists():
            self.nodes = [Node(**n) for n in json.loads(saved.read_text())]
        else:
            ports = sorted({free_port() for _ in range(4 * nodes)})[: 2 * nodes]
            if len(ports) < 2 * nodes:
                raise StackError("could not find free ports for the Kafka cluster")
            self.nodes = [Node(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(nodes)]
            saved.write_text(json.dumps([asdict(n) for n in self.nodes]))
        self.replicas = min(3, len(self.nodes))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def pid(self, node: Node) -> int | None:
        try:
            pid = int((self.run / f"{node.name}.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def up(self, timeout: float = 120.0) -> str:
        """Start every node that is not running; return once all of them serve metadata."""
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        jvm = kafka_jvm(java_cmd(), kafka_classpath())
        cluster_file = self.home / "cluster_id"
        if not cluster_file.exists():
            cluster_file.write_text(new_cluster_id())
        cluster_id = cluster_file.read_text().strip()
        for node in self.nodes:
            if self.pid(node) is not None:
                continue
            data = self.home / f"node{node.node_id}" / "data"
            props = write_kafka_properties(
                self.home / f"node{node.node_id}" / "server.properties",
                node.node_id,
                node.port,
                node.controller_port,
                data,
                voters,
                self.replicas,
            )
            format_kafka_storage(jvm, data, props, cluster_id)
            spawn(node.name, [*jvm, "kafka.Kafka", str(props)], logs=self.logs, run=self.run)
        self.wait_for_brokers(len(self.nodes), timeout)
        return self.bootstrap

    def wait_for_brokers(self, count: int, timeout: float) -> None:
        """Wait until the cluster's metadata lists ``count`` live brokers."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                brokers = admin.list_topics(timeout=3).brokers
                if len(brokers) >= count:
                    return
            except Exception:  # noqa: BLE001 - not ready yet during start-up polling
                pass
            time.sleep(0.5)
        tails = "\n".join(f"--- {n.name}\n{log_tail(n.name, 8, self.logs)}" for n in self.nodes)
        raise StackError(f"the Kafka cluster did not list {count} brokers within {timeout:.0f}s:\n{tails}")

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (no clean shutdown: its partitions' leadership moves when the controller notices)."""
        node = self.nodes[node_id - 1]
        pid = self.pid(node)
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)
            for _ in range(100):
                if not pid_alive(pid):
                    break
                time.sleep(0.05)

    def down(self) -> None:
        """Stop every node; all are asked at once (the last node alone cannot shut down in order)."""
        running = [(node, pid) for node in self.nodes if (pid := self.pid(node)) is not None]
        for _, pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        for node, pid in running:
            stop_pid(node.name, pid, run=self.run)


# --------------------------------------------------------------------------- the stack's cluster


def start_kafka_cluster(nodes: int) -> str:
    """A local KRaft cluster of ``nodes`` nodes in ``.stack/kafka-cluster``; returns its bootstrap servers."""
    started = time.monotonic()
    cluster = KafkaCluster(STACK / "kafka-cluster", nodes)
    bootstrap = cluster.up()
    log(f"kafka: cluster of {len(cluster.nodes)} nodes on {bootstrap} ({time.monotonic() - started:.1f}s)")
    return bootstrap


def stop_kafka_cluster() -> None:
    if (STACK / "kafka-cluster" / "nodes.json").exists():
        KafkaCluster(STACK / "kafka-cluster").down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--home", type=Path, required=True, help="the cluster's folder")
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        cluster = KafkaCluster(args.home.resolve(), args.nodes)
        if args.command == "up":
            print(cluster.up())
        else:
            cluster.down()
    except StackError as exc:
        print(f"[kafka-cluster] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
