"""The ``kafka`` section of a crawl task: the topic kept records go to, how their messages are keyed, routed and
delivered (:class:`KafkaTopicConfig`), and how their values are framed (:class:`KafkaConfig`).

A model only, as :mod:`crawler_ops.config.sections`: it validates values and does no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from pydantic import Field, JsonValue, model_validator

from crawler_ops.config.sections import StrictModel
from crawler_ops.lineage import env_bootstrap_servers, kafka_server
from crawler_ops.message.shaping import FIXED_HEADERS, MessageShape, Template
from crawler_ops.message.values import check_value_schema

if TYPE_CHECKING:
    from airflow.sdk import Asset

TOPIC = r"^[A-Za-z0-9._-]{1,249}$"


class KafkaTopicConfig(StrictModel):
    """Where kept records go: a topic, keyed by a record field, delivered at least or exactly once."""

    conn_id: str = Field(
        "kafka_default", description="Airflow connection of conn_type kafka, with librdkafka settings in its extra"
    )
    topic: str = Field(pattern=TOPIC, description="the topic kept records are published to")
    key_field: str | None = Field(
        "id",
        description="record field whose value is the message key; a record without it (or with it empty), or every "
        "record when null, is keyed by a SHA-256 of its canonical JSON",
    )
    key_fields: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        description="instead of key_field (left at its default): the key is these fields' values joined by ':' (a "
        "record lacking one is keyed by the SHA-256 of its JSON)",
    )
    key_template: str | None = Field(
        None,
        description="instead of key_field (left at its default): the key as a template over record fields, such "
        "as '{site}/{id}' ('{{' and '}}' are braces); a record lacking a field is keyed by the SHA-256 of its JSON",
    )
    headers: dict[str, str] = Field(
        {},
        description="more headers, name: template over record fields and {run.task}, {run.run_id}, {run.offset} (the "
        "source offset), {run.ref} (the run's reference time); a header whose field is absent or empty is left out",
    )
    topic_template: str | None = Field(
        None,
        description="route each kept record to the topic this template over record fields names, such as "
        "'jobs.{city_code}'; a record lacking a field goes to topic; a routed topic is created and checked as topic "
        "is, when a batch first sends to it; a name Kafka refuses dead-letters the record",
    )
    routed_topics: tuple[str, ...] = Field(
        (),
        description="the topics topic_template may route to, as shell-style patterns ('jobs.*', 'jobs.bj'); a record "
        "routed elsewhere is dead-lettered naming its topic; empty: any name Kafka accepts",
    )
    max_new_topics: int = Field(
        20,
        ge=0,
        le=10_000,
        description="topics one chunk may create for topic_template (a source decides the names): the batch that "
        "needs one more fails naming it; raise it, create the topics, or narrow routed_topics",
    )
    timestamp: Literal["record_date", "produce_time"] = Field(
        "record_date",
        description="the message timestamp: the record's date (the date the filter read, so retention, windows and "
        "offsetsForTimes follow it) or the time it is produced; dead letters and markers always carry produce time",
    )
    compression: Literal["lz4", "zstd", "gzip", "snappy", "none"] | None = Field(
        None, description="the producer's compression.type; default: the connection extra's, else lz4"
    )
    topic_config: dict[str, str | int | float | bool] = Field(
        {},
        description="topic settings (retention.ms, cleanup.policy, ...) given to the topic when crawler_ops creates "
        "it; on an existing topic, plan fails naming each setting whose value differs",
    )
    partitions: int = Field(
        3, ge=1, description="partitions of the topic and dead-letter topic when crawler_ops creates them"
    )
    partitioner: (
        Literal["murmur2_random", "murmur2", "consistent_random", "consistent", "fnv1a_random", "fnv1a", "random"]
        | None
    ) = Field(
        None,
        description="how a key picks its partition (librdkafka's partitioner); default: the connection extra's "
        "partitioner, else murmur2_random, which places a key where the Java producer does",
    )
    replication_factor: int | None = Field(
        None,
        ge=1,
        description="replicas of a topic crawler_ops creates; default min(3, brokers), with min.insync.replicas one "
        "less (at least 1) so acks=all survives a broker",
    )
    create_topic: bool = Field(
        True,
        description="plan creates a missing topic, dead-letter topic or marker topic; false: a missing one fails the "
        "run, naming it",
    )
    max_message_bytes: int = Field(
        1_000_000,
        ge=1024,
        description="a kept record whose message is larger (key and value) is dead-lettered with its size; at most "
        "the producer's and the topic's message.max.bytes (librdkafka's default is 1000000)",
    )
    dead_letter_topic: str | None = Field(
        None,
        pattern=TOPIC,
        description="also publish dead-lettered records here (with the reason), before the batch is done",
    )
    consumer_groups: tuple[str, ...] = Field((), description="consumer groups whose lag the status view shows")
    delivery: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once",
        description="exactly_once: each batch in one Kafka transaction with its completion marker; consumers "
        "must read with isolation.level=read_committed",
    )
    marker_topic: str | None = Field(
        None,
        pattern=TOPIC,
        description="exactly_once: the compacted topic of batch completion markers; default crawler_ops.batches.<id>",
    )
    asset_host: str | None = Field(
        None,
        description="host part of the topic's Asset URI kafka://<host>/<topic>; default: the connection's first "
        "bootstrap server when the environment defines the connection (AIRFLOW_CONN_<ID>), else the connection id",
    )

    @model_validator(mode="after")
    def _shaped(self) -> KafkaTopicConfig:
        self.shape  # noqa: B018 - one key, templates that parse, header names of its own; or the error names them
        return self

    @cached_property
    def shape(self) -> MessageShape:
        """The key (``key_field``, ``key_fields`` joined by ':', or ``key_template``), headers and timestamp of this
        config's messages; a ValueError names the template that does not parse, or the settings that do not go
        together."""
        given = [name for name in ("key_fields", "key_template") if getattr(self, name) is not None]
        if given and self.key_field != KafkaTopicConfig.model_fields["key_field"].default:
            given.insert(0, "key_field")
        if len(given) > 1:
            raise ValueError(f"set only one of key_field, key_fields and key_template (got {' and '.join(given)})")
        clash = [name for name in self.headers if name in FIXED_HEADERS]
        if clash:
            raise ValueError(f"headers: {', '.join(clash)} is a header every message carries already; choose another")
        key = MessageShape.field(self.key_field)
        text = self.key_template
        if self.key_fields is not None:
            text = ":".join(f"{{{name}}}" for name in self.key_fields)
        if text is not None:
            try:
                key = MessageShape.of(text)
            except ValueError as exc:
                raise ValueError(f"key_template: {exc}") from exc
        headers = []
        for name, template in self.headers.items():
            try:
                headers.append((name, Template.parse(template)))
            except ValueError as exc:
                raise ValueError(f"headers.{name}: {exc}") from exc
        try:
            topic = Template.parse(self.topic_template, allow_run=False) if self.topic_template else None
        except ValueError as exc:
            raise ValueError(f"topic_template: {exc}") from exc
        reserved = frozenset(t for t in (self.dead_letter_topic, self.marker_topic) if t is not None)
        return replace(
            key,
            headers=tuple(headers),
            record_time=self.timestamp == "record_date",
            topic=topic,
            reserved=reserved,
            routes=self.routed_topics,
        )

    @property
    def unique_key_field(self) -> str | None:
        """The one field that keys records (the key of a feed's newest record), when the key is one field."""
        return self.shape.key_field

    @model_validator(mode="after")
    def _separate_dead_letters(self) -> KafkaTopicConfig:
        if self.dead_letter_topic == self.topic:
            raise ValueError("dead_letter_topic must differ from topic, or dead letters would look like records")
        if self.marker_topic is not None and self.marker_topic in (self.topic, self.dead_letter_topic):
            raise ValueError("marker_topic must differ from topic and dead_letter_topic")
        return self

    @property
    def asset_host_default(self) -> str:
        """The Asset URI's host when ``asset_host`` is unset, known without I/O (DAG parsing does none): the
        connection's first bootstrap server if the environment defines the connection, so the Asset and the
        OpenLineage dataset of the topic match; else the connection id (a connection in the metadata DB or a secrets
        backend is read only when a task runs, which then warns that the two differ)."""
        try:
            servers = env_bootstrap_servers(self.conn_id)
            return kafka_server(servers) if servers else self.conn_id
        except (ValueError, TypeError, AttributeError):
            # A connection variable that does not read (bad JSON, no server) is the task runner's error to report,
            # when a task connects; the DAG still builds, named by the connection id.
            return self.conn_id

    @property
    def asset_uri(self) -> str:
        return f"kafka://{self.asset_host or self.asset_host_default}/{self.topic}"

    @property
    def asset(self) -> Asset:
        """The Airflow Asset of the topic; downstream DAGs schedule on it (``schedule=[Asset(uri)]``)."""
        from airflow.sdk import Asset  # imported here: the config model stays importable without Airflow

        return Asset(uri=self.asset_uri)


class KafkaConfig(KafkaTopicConfig):
    """Where kept records go: a topic, keyed by a record field, delivered at least or exactly once; each value the
    record's JSON as the source sent it, or framed for a Schema Registry."""

    value_format: Literal["json", "json_schema", "avro"] = Field(
        "json",
        description="json: the record's JSON text, as the source sent it. json_schema or avro: framed for a Schema "
        "Registry (magic byte 0, the schema id in 4 bytes, then JSON text or Avro binary), the schema registered under "
        "the subject <topic>-value and checked in plan before anything is produced",
    )
    registry_conn_id: str = Field(
        "schema_registry",
        description="json_schema/avro: Airflow http connection to the registry's Confluent-compatible API (its base "
        "URL, with the path, in host; a login gives basic auth)",
    )
    value_schema: dict[str, JsonValue] | str | None = Field(
        None,
        description="json_schema/avro: the schema (a JSON Schema, or an Avro record schema), inline or a file path "
        "(relative to the config's folder); default: the subject's latest version, or, for a new subject, a closed "
        "schema inferred from the newest page",
    )
    contract: Literal["freeze", "evolve", "discard_row"] | None = Field(
        None,
        description="json_schema/avro, when records do not fit the schema (a new, missing or retyped field): freeze "
        "(default) fails the plan naming the fields (a record found later fails its batch); evolve registers a "
        "widened version (not with value_schema); discard_row dead-letters each such record, naming the field",
    )

    @model_validator(mode="after")
    def _framing(self) -> KafkaConfig:
        if self.value_format == "json":
            if self.value_schema is not None or self.contract is not None:
                raise ValueError("value_schema and contract need value_format json_schema or avro")
            return self
        if self.value_schema is not None and self.contract == "evolve":
            raise ValueError(
                "contract evolve widens an inferred schema; with value_schema the schema is yours: edit it to evolve it"
            )
        if self.topic_template is not None and self.contract == "evolve":
            raise ValueError(
                "contract evolve with topic_template: each routed topic's subject holds the schema the plan settled, "
                "registered when a chunk first routes to it, and a version evolved in a chunk would reach one subject "
                "only; use freeze or discard_row, or evolve the schema yourself (value_schema)"
            )
        if isinstance(self.value_schema, dict):
            check_value_schema(self.value_format, self.value_schema)
        return self

    @property
    def value_contract(self) -> Literal["freeze", "evolve", "discard_row"]:
        return self.contract or "freeze"
