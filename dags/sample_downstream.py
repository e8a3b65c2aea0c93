"""Sample downstream DAG ``sample_jobs_beijing_downstream``: runs when ``crawl_jobs_beijing`` published new records.

It is scheduled on the topic's Asset (``kafka://<host>/jobs.beijing``), which the crawl's ``announce`` task emits
with the run summary as the event's extra, only when the run published something. It reads the new
messages as consumer group ``jobs_beijing.downstream_sample`` (listed under the task's
``kafka.consumer_groups``, so the status view shows its lag) and commits its offsets. Copy it as the
starting point of a real consumer DAG. ``$CRAWLER_OPS_SAMPLE_DOWNSTREAM_TASK`` picks another crawl task;
the DAG is absent when the config has no such task.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import dag, get_parsing_context, task

from crawler_ops.config import load_config

if TYPE_CHECKING:
    from airflow.providers.apache.kafka.hooks.consume import KafkaConsumerHook

log = logging.getLogger(__name__)
# The crawl task followed; the tests point it at their own task.
SOURCE_TASK = os.environ.get("CRAWLER_OPS_SAMPLE_DOWNSTREAM_TASK", "jobs_beijing")
GROUP = f"{SOURCE_TASK}.downstream_sample"
DAG_ID = f"sample_{SOURCE_TASK}_downstream"


def group_consumer_hook(topics: list[str], conn_id: str) -> KafkaConsumerHook:
    """A consumer of the connection's cluster in the fixed consumer group, committing offsets explicitly.

    The Kafka client is imported here, when the task runs, so parsing this file stays cheap.
    """
    from airflow.providers.apache.kafka.hooks.consume import KafkaConsumerHook
    from confluent_kafka import Consumer

    class GroupConsumerHook(KafkaConsumerHook):
        def _get_client(self, config: dict[str, Any]) -> Consumer:
            group = {"group.id": GROUP, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
            return super()._get_client({**config, **group, "enable.partition.eof": True})

    return GroupConsumerHook(topics, conn_id)


def read_new_messages(hook: KafkaConsumerHook, idle_s: float = 5.0, join_s: float = 60.0) -> int:
    """Consume until every assigned partition reached its end, then commit; returns the messages read."""
    from confluent_kafka import KafkaError

    consumer = hook.get_consumer()
    read, at_end = 0, set()
    joined_by = time.monotonic() + join_s
    try:
        while True:
            message = consumer.poll(idle_s)
            if message is None:
                # Silence before the group assigned us partitions (the broker's initial rebalance delay) is
                # not the end of the topic.
                if not consumer.assignment() and time.monotonic() < joined_by:
                    continue
                break
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
                if consumer.assignment() and at_end >= {tp.partition for tp in consumer.assignment()}:
                    break
                continue
            if error is not None:
                raise RuntimeError(f"consumer group {GROUP}: {error}")
            read += 1
        if read:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return read


cfg = next((t for t in load_config().tasks if t.id == SOURCE_TASK), None)
if cfg is not None and get_parsing_context().dag_id in (None, DAG_ID):
    asset = cfg.kafka.asset

    @dag(
        dag_id=DAG_ID,
        schedule=[asset],
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=["crawler_ops", "sample"],
        doc_md=__doc__,
    )
    def sample_downstream() -> None:
        @task
        def consume_new_records(**context: Any) -> dict[str, Any]:
            summaries = [e.extra for e in context["triggering_asset_events"].get(asset, [])]
            for summary in summaries:
                log.info("crawl run %s published %s records", summary.get("run_id"), summary.get("published"))
            read = read_new_messages(group_consumer_hook([cfg.kafka.topic], cfg.kafka.conn_id))
            log.info("consumer group %s read %d new messages from %s", GROUP, read, cfg.kafka.topic)
            return {"events": len(summaries), "published": sum(s.get("published", 0) for s in summaries), "read": read}

        consume_new_records()

    sample_downstream()
