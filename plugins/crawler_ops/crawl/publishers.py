"""Which publisher a run's chunk sends its records with: none for a dry run, the idempotent producer, or Kafka
transactions with each batch's marker for exactly-once delivery (both crawl strategies use it)."""

from __future__ import annotations

from collections.abc import Sequence

from crawler_ops.crawl.ledger import Ledger
from crawler_ops.crawl.run import RunContext
from crawler_ops.hooks.kafka.exactly_once import MarkerLog, TransactionalPublisher, transactional_id
from crawler_ops.hooks.kafka.producer import (
    DryRunPublisher,
    IdempotentProducerHook,
    KafkaPublisher,
    Publisher,
    task_settings,
)
from crawler_ops.planning import Batch


def publisher_for(run: RunContext, batches: Sequence[Batch], ledger: Ledger, schema_id: int | None = None) -> Publisher:
    """Nothing for a dry run; the idempotent producer; or, for exactly-once delivery, Kafka transactions with the
    batches' markers (a replay's or backfill's own: it publishes its range once, however often it is retried).
    ``schema_id``: the value schema the plan settled, which each topic a record is routed to gets under its subject."""
    cfg = run.cfg
    if run.params.dry_run:
        return DryRunPublisher()
    hook = IdempotentProducerHook(cfg.kafka.conn_id, task_settings(cfg.kafka))
    routes = run.topics(hook.admin, schema_id) if cfg.kafka.topic_template is not None else None
    if cfg.kafka.delivery == "at_least_once":
        return KafkaPublisher(hook.get_producer(), cfg.kafka.topic, cfg.id, prepare=routes)
    generations = ledger.generations(batches)  # none for replays and backfills: their markers are their run's
    per_run = not run.uses_status_table
    markers = MarkerLog(hook.client_config(), cfg.marker_topic, cfg.id, run.run_id, generations, per_run=per_run)
    tid = transactional_id(cfg.id, batches, None if run.uses_status_table else run.run_id)
    producer = hook.transactional_producer(tid)
    return TransactionalPublisher(producer, cfg.kafka.topic, cfg.id, markers, holds=ledger.renew, prepare=routes)
