"""The value schema of a task whose ``kafka.value_format`` uses a Schema Registry (json_schema, avro): settled in
``plan``, before anything is produced, and applied by the chunks.

In plan, under the subject ``<topic>-value``:

- with ``kafka.value_schema``, that schema is registered (the registry answers the id of an identical version);
  one that cannot read what the latest version wrote (BACKWARD), or that the registry's level refuses, fails the
  plan, naming the fields that break;
- without it, the subject's latest version is used; a new subject gets a closed schema inferred from the newest page.

Then the newest page's kept records are checked against the schema (:class:`~crawler_ops.message.values.ValueCodec`).
When some do not fit, ``kafka.contract`` decides: ``freeze`` fails the plan naming each field and how many records;
``evolve`` registers a widened schema (the old one merged with what the records show); ``discard_row`` keeps the
schema, and the chunks dead-letter each record that does not fit, naming the field.

A chunk frames values with the id the plan settled (:func:`value_codec`). A record the plan did not see that does
not fit: ``freeze`` fails its batch, ``evolve`` registers a widened version from that page, ``discard_row``
dead-letters it.
"""

from __future__ import annotations

import functools
import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.config.loading import config_path
from crawler_ops.errors import ConfigError, RegistryError, SourceError
from crawler_ops.hooks.kafka.registry import SchemaRegistryHook, SchemaType, schema_type_of, subject_of
from crawler_ops.message.schemas import (
    avro_schema,
    incompatible_fields,
    json_schema,
    json_schema_breaks,
    widen_avro_schema,
    widen_json_schema,
)
from crawler_ops.message.values import Misfit, ValueCodec

log = logging.getLogger(__name__)

Records = Callable[[], Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class Settled:
    """The schema id a run's chunks write with, and a note for the run's summary (None: nothing to say)."""

    schema_id: int
    note: str | None = None


def schema_type(cfg: CrawlTaskConfig) -> SchemaType:
    return schema_type_of(cfg.kafka.value_format)


def given_schema(cfg: CrawlTaskConfig) -> dict[str, Any] | None:
    """``kafka.value_schema``: inline, or read from its file (a relative path is under the config's folder)."""
    given = cfg.kafka.value_schema
    if given is None or isinstance(given, dict):
        return given
    path = Path(given)
    if not path.is_absolute():
        base = config_path()
        path = (base if base.is_dir() else base.parent) / path
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"task {cfg.id}: kafka.value_schema {path} cannot be read as JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise ConfigError(f"task {cfg.id}: kafka.value_schema {path} holds no schema object")
    return schema


def inferred(cfg: CrawlTaskConfig, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A closed schema of ``records`` in the task's value format: objects hold only the fields seen, each of them
    optional and nullable (a page does not show every field a source may leave out)."""
    if cfg.kafka.value_format == "avro":
        return avro_schema(records, name=cfg.id, loose=True)
    return json_schema(records, title=cfg.id, closed=True, loose=True)


def widened(cfg: CrawlTaskConfig, schema: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    if cfg.kafka.value_format == "avro":
        return widen_avro_schema(schema, records)
    return widen_json_schema(schema, records)


def breaks(cfg: CrawlTaskConfig, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why records written with ``old`` cannot be read with ``new``, one sentence a field."""
    if cfg.kafka.value_format == "avro":
        return incompatible_fields(old, new)
    return json_schema_breaks(old, new)


def settle_value_schema(cfg: CrawlTaskConfig, newest: Records, dry_run: bool = False) -> Settled | None:
    """The schema id of this run (see the module's rules); None on a dry run of a subject with no version yet.
    A :class:`SourceError` (not retriable) when the contract or the registry refuses."""
    registry = SchemaRegistryHook(cfg.kafka.registry_conn_id)
    subject, kind = subject_of(cfg.kafka.topic), schema_type(cfg)
    try:
        latest = registry.latest(subject)
        given = given_schema(cfg)
        if given is not None:
            if latest is not None and latest.schema == given:
                current_id, current = latest.id, given
            else:
                current_id, current = register(cfg, registry, given, latest, dry_run), given
        elif latest is not None:
            if latest.schema_type != kind:
                raise SourceError(
                    f"task {cfg.id}: subject '{subject}' holds {latest.schema_type} schemas, but kafka.value_format is "
                    f"{cfg.kafka.value_format}; use another topic or the subject's format",
                    retriable=False,
                )
            current_id, current = latest.id, latest.schema
        else:
            records = newest()
            if not records:
                return None
            first = inferred(cfg, records)
            current_id, current = register(cfg, registry, first, None, dry_run), first
            log.info(
                "task %s: subject %s is new; registered a schema inferred from %d records",
                cfg.id,
                subject,
                len(records),
            )
        records = newest() if latest is not None or given is not None else records
        settled = check_newest(cfg, registry, current_id, current, records, dry_run)
        # A dry run registers nothing: with no version yet its chunks have no id to frame with (and produce nothing).
        return settled if settled.schema_id else None
    finally:
        registry.close()


def register(
    cfg: CrawlTaskConfig, registry: SchemaRegistryHook, schema: Mapping[str, Any], latest: Any, dry_run: bool
) -> int:
    """``schema``'s id under the task's subject. A schema that cannot read what the latest version wrote (BACKWARD)
    fails the plan naming the fields, even when the subject's own level would accept it (a registry's default level
    may be NONE); so does a refusal by the registry. A dry run registers nothing (id 0)."""
    subject, kind = subject_of(cfg.kafka.topic), schema_type(cfg)
    if latest is not None and latest.schema_type == kind and breaks(cfg, latest.schema, schema):
        raise refused(cfg, latest.schema, schema, latest.version)  # whatever level the registry's subject has
    if dry_run:
        if latest is not None and not registry.compatible(subject, schema, kind):
            raise refused(cfg, latest.schema, schema, latest.version)
        return latest.id if latest is not None else 0
    try:
        return registry.register(subject, schema, kind)
    except RegistryError as exc:
        if exc.retriable or latest is None:
            raise
        raise refused(cfg, latest.schema, schema, latest.version, exc) from exc


def refused(
    cfg: CrawlTaskConfig, old: Mapping[str, Any], new: Mapping[str, Any], version: int, exc: Exception | None = None
) -> SourceError:
    fields = breaks(cfg, old, new) or [f"the registry refused it: {exc}" if exc else "the registry refused it"]
    return SourceError(
        f"task {cfg.id}: the value schema is not compatible with version {version} of subject "
        f"'{subject_of(cfg.kafka.topic)}' (BACKWARD: it must read what that version wrote): "
        + "; ".join(fields)
        + ". Nothing was produced. Change the schema so old records still read, or register the change yourself",
        retriable=False,
    )


def check_newest(
    cfg: CrawlTaskConfig,
    registry: SchemaRegistryHook,
    schema_id: int,
    schema: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    dry_run: bool,
) -> Settled:
    """The newest page's records against the schema, and what the contract does when some do not fit."""
    codec = ValueCodec(cfg.kafka.value_format, schema_id, schema)
    unfit = misfits(codec, records)
    if not unfit:
        return Settled(schema_id)
    why = describe(unfit, len(records))
    contract = cfg.kafka.value_contract
    subject = subject_of(cfg.kafka.topic)
    if contract == "freeze":
        raise SourceError(
            f"task {cfg.id}: the newest page's records do not fit the value schema (subject '{subject}', id "
            f"{schema_id}): {why}. Nothing was produced (contract freeze). Register a version that accepts them, or "
            "set kafka.contract to evolve (register a widened schema) or discard_row (dead-letter such records)",
            retriable=False,
        )
    if contract == "discard_row":
        note = f"task {cfg.id}: records that do not fit the value schema (id {schema_id}) are dead-lettered: {why}"
        log.warning("%s", note)
        return Settled(schema_id, note)
    wider = widened(cfg, schema, [record for record, _ in unfit])
    new_id = register(cfg, registry, wider, registry.latest(subject), dry_run)
    note = f"task {cfg.id}: value schema evolved from id {schema_id} to {new_id} (contract evolve): {why}"
    log.warning("%s", note)
    return Settled(new_id, note)


def misfits(codec: ValueCodec, records: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], str]]:
    found = []
    for record in records:
        try:
            codec.encode(record)
        except Misfit as exc:
            found.append((record, str(exc)))
    return found


def describe(unfit: Sequence[tuple[Any, str]], seen: int) -> str:
    """``field 'x' is not in the schema (12 of 1000 records); ...``: each reason once, with its count."""
    counts = Counter(why for _, why in unfit)
    return "; ".join(f"{why} ({n} of {seen} records)" for why, n in counts.most_common(10))


@functools.lru_cache(maxsize=32)
def registered_schema(conn_id: str, schema_id: int) -> str:
    """The schema text of ``schema_id`` (ids never change, so one lookup a process)."""
    registry = SchemaRegistryHook(conn_id)
    try:
        return json.dumps(registry.schema(schema_id))
    finally:
        registry.close()


def value_codec(cfg: CrawlTaskConfig, schema_id: int | None) -> ValueCodec | None:
    """How a chunk frames values: with the schema id its plan settled (None: the task publishes JSON as sent)."""
    if schema_id is None or cfg.kafka.value_format == "json":
        return None
    return ValueCodec(
        cfg.kafka.value_format, schema_id, json.loads(registered_schema(cfg.kafka.registry_conn_id, schema_id))
    )


def evolve_codec(cfg: CrawlTaskConfig, codec: ValueCodec, records: Sequence[Any]) -> ValueCodec:
    """contract evolve, in a chunk: a widened version that accepts ``records`` (decoded), registered now."""
    registry = SchemaRegistryHook(cfg.kafka.registry_conn_id)
    try:
        wider = widened(cfg, codec.schema, records)
        new_id = register(cfg, registry, wider, registry.latest(subject_of(cfg.kafka.topic)), False)
    finally:
        registry.close()
    log.warning("task %s: value schema evolved from id %d to %d (contract evolve)", cfg.id, codec.schema_id, new_id)
    return ValueCodec(cfg.kafka.value_format, new_id, wider)


def decoded_records(page: Sequence[Any], transform: Callable[[Any], Any] | None) -> list[Mapping[str, Any]]:
    """A page's records as the value is made of them: decoded, transformed; records that fail either are left out
    (filtering dead-letters them)."""
    records = []
    for record in page:
        try:
            value = msgspec.json.decode(record) if isinstance(record, msgspec.Raw) else record
            value = transform(value) if transform is not None else value
        except Exception:  # noqa: BLE001 - filtering names such a record in its dead letter
            continue
        if isinstance(value, Mapping):
            records.append(value)
    return records


OUTCOMES = {
    "freeze": "the next plan fails, nothing produced (contract freeze)",
    "evolve": "the next plan registers a widened version (contract evolve)",
    "discard_row": "such records are dead-lettered (contract discard_row)",
}


def registry_report(cfg: CrawlTaskConfig, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the next plan would make of ``records`` (a page's, decoded and transformed), read-only: the subject, the
    schema it would write with, how many records do not fit it and why, and what the contract would do; ``error``
    when the registry or the given schema cannot be read."""
    subject = subject_of(cfg.kafka.topic)
    report: dict[str, Any] = {
        "subject": subject,
        "format": cfg.kafka.value_format,
        "contract": cfg.kafka.value_contract,
    }
    registry = SchemaRegistryHook(cfg.kafka.registry_conn_id)
    try:
        latest = registry.latest(subject)
        given = given_schema(cfg)
    except (RegistryError, ConfigError) as exc:
        return report | {"error": str(exc)}
    finally:
        registry.close()
    report["latest"] = None if latest is None else {"version": latest.version, "id": latest.id}
    if given is not None:
        schema, report["schema"] = given, "kafka.value_schema"
    elif latest is not None:
        schema, report["schema"] = latest.schema, f"version {latest.version} (id {latest.id})"
    elif records:
        schema, report["schema"] = inferred(cfg, records), "new subject: the first plan registers one inferred here"
    else:
        return report | {"schema": "new subject, and no record to infer one from", "records": 0, "misfits": 0}
    unfit = misfits(ValueCodec(cfg.kafka.value_format, latest.id if latest else 0, schema), records)
    report |= {"records": len(records), "misfits": len(unfit), "why": describe(unfit, len(records))}
    if unfit:
        report["outcome"] = OUTCOMES[cfg.kafka.value_contract]
    return report
