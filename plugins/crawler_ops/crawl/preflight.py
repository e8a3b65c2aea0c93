"""What a run makes ready before it plans anything: its topics exist with the settings it needs, and the value schema
of a registry format is settled (registered, or checked against the topic's contract) before anything is produced."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from crawler_ops.crawl.batch_filter import load_transform
from crawler_ops.crawl.contract import Settled, decoded_records, settle_value_schema
from crawler_ops.crawl.run import RunContext
from crawler_ops.hooks.kafka.exactly_once import MARKER_TOPIC_CONFIG
from crawler_ops.hooks.kafka.producer import IdempotentProducerHook, ensure_topic
from crawler_ops.hooks.source.hook import SourceApiHook


def prepare(run: RunContext, source: SourceApiHook, total: int) -> Settled | None:
    """The run's topics ready (not for a dry run, which produces nothing), then its value schema settled."""
    if not run.params.dry_run:
        ensure_topics(run)
    return settle_schema(run, source, total)


def ensure_topics(run: RunContext) -> None:
    """The task's topic and dead-letter topic, and for exactly-once delivery its compacted marker topic."""
    cfg = run.cfg
    kafka = cfg.kafka
    admin = IdempotentProducerHook(kafka.conn_id).admin()
    run.topics(lambda: admin).prepare(kafka.topic)
    if kafka.dead_letter_topic is not None:
        ensure_topic(
            admin, kafka.dead_letter_topic, kafka.partitions, kafka.replication_factor, kafka.create_topic, cfg.id
        )
    if kafka.delivery == "exactly_once":
        ensure_topic(
            admin, cfg.marker_topic, 1, kafka.replication_factor, kafka.create_topic, cfg.id, config=MARKER_TOPIC_CONFIG
        )


def settle_schema(run: RunContext, source: SourceApiHook, total: int) -> Settled | None:
    """The value schema's registry id, settled on the newest page of offsets (none without records)."""
    if total == 0:
        return None
    size = min(run.cfg.batch_size, total)
    return settle_on(run, lambda: source.get_page(total - size, size))


def settle_on(run: RunContext, newest_page: Callable[[], Sequence[Any]]) -> Settled | None:
    """The value schema's registry id, settled before anything is produced (value_format json_schema or avro): the
    records of ``newest_page`` (read when needed), transformed, are what a new subject's schema is inferred from and
    what the contract is checked on."""
    cfg = run.cfg
    if cfg.kafka.value_format == "json":
        return None
    transform = load_transform(cfg)

    def newest() -> list[dict[str, Any]]:
        return decoded_records(newest_page(), transform)  # type: ignore[return-value]

    return settle_value_schema(cfg, newest, run.params.dry_run)
