"""The benchmark's own producer counts what Kafka took, under the project's producer settings (which report only
failed deliveries): a bench that counted success reports printed 0 messages published and a limit of 0."""

from __future__ import annotations

import pytest

from tests.support import create_topic, read_topic

pytestmark = pytest.mark.integration


def test_the_bench_producer_counts_each_delivered_message_with_the_projects_settings(kafka_bootstrap, unique_id):
    from crawlbench.environment import Stack, producer_settings
    from crawlbench.topics import CountingProducer

    settings = producer_settings()
    assert settings["delivery.report.only.error"] is True, "the settings this test is about"
    topic = f"bench.{unique_id}"
    create_topic(kafka_bootstrap, topic)
    stack = Stack(env={}, source_url="", bootstrap=kafka_bootstrap, pg_uri="", producer_settings=settings)
    producer = CountingProducer(stack)

    for i in range(30):
        producer.produce(topic, b"%d" % i, b"{}")
    producer.flush("first page")
    for i in range(30, 50):
        producer.produce(topic, b"%d" % i, b"{}")
    producer.flush("second page")

    assert producer.delivered == 50
    assert sorted(int(m.key) for m in read_topic(kafka_bootstrap, topic)) == list(range(50))


def test_the_topics_of_a_benchmarks_data_sets_are_deleted_when_it_ends_and_no_others(
    kafka_bootstrap, unique_id, monkeypatch
):
    from confluent_kafka.admin import AdminClient

    from crawlbench import topics

    monkeypatch.setattr(topics, "_datasets", set())
    monkeypatch.setattr(topics.atexit, "register", lambda _: None)  # called here instead
    monkeypatch.setenv("CRAWLER_OPS_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.delenv(topics.KEEP_TOPICS, raising=False)
    ours, other = f"b{unique_id}", f"b{unique_id}x"
    names = [ours, f"{ours}.chunk", f"{ours}.old", other, f"{other}.chunk"]
    for name in names:
        create_topic(kafka_bootstrap, name)
    assert topics.drop_topics_at_exit(ours) == ours

    monkeypatch.setenv(topics.KEEP_TOPICS, "1")
    topics.drop_dataset_topics()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert set(names) <= set(admin.list_topics(timeout=10).topics)

    monkeypatch.delenv(topics.KEEP_TOPICS)
    topics.drop_dataset_topics()
    left = set(admin.list_topics(timeout=10).topics)
    assert not left & {ours, f"{ours}.chunk", f"{ours}.old"}
    assert {other, f"{other}.chunk"} <= left
    admin.delete_topics([other, f"{other}.chunk"], operation_timeout=30)
