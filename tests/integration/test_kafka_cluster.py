"""A crawl against a 3-node Kafka cluster (replication 3, min.insync.replicas 2) while brokers are SIGKILLed.

One node down: the chunk finishes in its first attempt, nothing is lost, and the partitions the killed node led
have new leaders. Two nodes down: the chunk fails with a clear delivery error instead of losing records, and
the next attempt, once the nodes are back, completes with every record delivered.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, plan_run
from kafka_cluster import KafkaCluster
from tests.support import make_task, query, read_topic, runner_result, spawn_chunk
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REF = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stack: dict[str, str]) -> Iterator[KafkaCluster]:
    nodes = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), nodes=3)
    nodes.up()
    yield nodes
    nodes.down()


@pytest.fixture
def cluster_conn(cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow connection to the cluster; deliveries give up after 15 s so a lost quorum fails fast."""
    extra = {"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 15_000}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_CLUSTER", json.dumps({"conn_type": "kafka", "extra": extra}))
    return "kafka_cluster"


def leaders(cluster: KafkaCluster, topic: str) -> dict[int, int]:
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    return {p: info.leader for p, info in metadata.topics[topic].partitions.items()}


def done_batches(pg_uri: str, task_id: str) -> int:
    sql = "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 2"
    return int(query(pg_uri, sql, task_id)[0][0])


def crawl_until(pg_uri: str, task_id: str, worker: subprocess.Popen, batches: int) -> None:
    deadline = time.monotonic() + 120
    while done_batches(pg_uri, task_id) < batches:
        assert worker.poll() is None, "the chunk finished before the brokers could be killed"
        assert time.monotonic() < deadline, "the chunk made no progress"
        time.sleep(0.02)


def setup_crawl(source: Any, unique_id: str, conn_id: str) -> tuple[CrawlTaskConfig, RunContext, dict[str, Any]]:
    source.create(unique_id, total=4_000, ref=REF, in_window_share=1.0)
    source.faults(unique_id, latency_ms=40)
    kafka = {"conn_id": conn_id, "partitions": 3, "replication_factor": 3}
    cfg = make_task(unique_id, max_chunks=1, source={"concurrency": 2}, kafka=kafka)
    run = RunContext(cfg=cfg, run_id="cluster-run", ref=REF, params=RunParams())
    [chunk] = plan_run(run)
    return cfg, run, chunk


def in_window(source: Any, unique_id: str) -> set[str]:
    return set(source.truth(unique_id, REF, days=7, tolerance_s=24 * 3600)["in_window_ids"])


def test_a_broker_killed_mid_crawl_costs_no_retry_and_no_record_and_its_partitions_move(
    source, pg_uri, unique_id, cluster, cluster_conn
):
    cfg, run, chunk = setup_crawl(source, unique_id, cluster_conn)
    before = leaders(cluster, cfg.kafka.topic)
    victim = before[0]
    worker = spawn_chunk(cfg, run.run_id, REF, chunk, 1)
    crawl_until(pg_uri, unique_id, worker, 5)

    cluster.kill(victim)
    out, _ = worker.communicate(timeout=300)
    cluster.up()  # the node comes back for the next test

    assert worker.returncode == 0, "the first attempt failed: a task retry would have been needed"
    result = json.loads(out.strip().splitlines()[-1])
    assert commit_run(run, [chunk], [result]).status == "success"
    seen = [m.key for m in read_topic(cluster.bootstrap, cfg.kafka.topic)]
    assert set(seen) == in_window(source, unique_id)
    moved = {p for p, leader in before.items() if leader == victim}
    after = leaders(cluster, cfg.kafka.topic)
    assert moved and all(after[p] != victim for p in moved), f"leaders before {before}, after {after}"


def test_two_brokers_down_fail_the_chunk_clearly_and_the_retry_after_they_return_loses_nothing(
    source, pg_uri, unique_id, cluster, cluster_conn
):
    cfg, run, chunk = setup_crawl(source, unique_id, cluster_conn)
    worker = spawn_chunk(cfg, run.run_id, REF, chunk, 1)
    crawl_until(pg_uri, unique_id, worker, 3)

    cluster.kill(2)
    cluster.kill(3)
    worker.communicate(timeout=300)
    assert worker.returncode != 0, "the chunk went on without a quorum of replicas"
    errors = query(pg_uri, "SELECT reason FROM crawler_ops.crawl_error WHERE task_id = %s", unique_id)
    assert any("Kafka confirmed" in reason and "retried" in reason for (reason,) in errors), errors
    assert done_batches(pg_uri, unique_id) < 40

    cluster.up()
    result = runner_result(spawn_chunk(cfg, run.run_id, REF, chunk, 2))
    assert commit_run(run, [chunk], [result]).status == "success"
    seen = [m.key for m in read_topic(cluster.bootstrap, cfg.kafka.topic)]
    assert set(seen) == in_window(source, unique_id)


def topic_layout(bootstrap: str, topic: str) -> tuple[int, str]:
    """Replicas per partition (the fewest) and min.insync.replicas of ``topic``.

    A created topic reaches each broker's metadata a moment after the controller commits it, and the admin client
    may ask a broker that has not caught up yet: such a broker answers "unknown topic", so the question is asked
    again until every answer knows the topic.
    """
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def layout() -> tuple[int, str] | None:
        info = admin.list_topics(topic, timeout=10).topics[topic]
        try:
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return None
            raise
        if info.error is not None or not info.partitions:
            return None
        return min(len(p.replicas) for p in info.partitions.values()), configs["min.insync.replicas"].value

    return wait_until(layout, 30, f"topic '{topic}' known to the brokers")


def test_topics_get_three_replicas_and_min_insync_two_on_a_cluster_by_default(
    source, cluster, cluster_conn, unique_id, caplog
):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"conn_id": cluster_conn, "dead_letter_topic": f"test.{unique_id}.dead"})
    assert cfg.kafka.replication_factor is None

    plan_run(RunContext(cfg=cfg, run_id="topics", ref=REF, params=RunParams()))

    assert topic_layout(cluster.bootstrap, cfg.kafka.topic) == (3, "2")
    assert topic_layout(cluster.bootstrap, f"test.{unique_id}.dead") == (3, "2")
    assert "single replica" not in caplog.text


def test_a_single_broker_gets_one_replica_and_a_warning(source, kafka_bootstrap, unique_id, caplog):
    source.create(unique_id, total=200, ref=REF, in_window_share=1.0)
    cfg = make_task(unique_id)

    plan_run(RunContext(cfg=cfg, run_id="topics", ref=REF, params=RunParams()))

    assert topic_layout(kafka_bootstrap, cfg.kafka.topic) == (1, "1")
    assert f"Kafka topic '{cfg.kafka.topic}' has a single replica" in caplog.text
