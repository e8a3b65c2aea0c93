"""Field drift: which top-level fields the published records carry, with a count per JSON type, and how a run's
fields differ from what the task published before (new, missing and retyped fields).

Pure: no Airflow, no I/O. A batch's :class:`FieldProfile` is made from its published messages (the value consumers
see: the record as the source sent it, or a transform's output) and added to its run record with the batch's done
mark; the commit compares the run's profile with the task's baseline (:meth:`FieldProfile.compare`).

Profiling reads the first ``drift_sample`` published records of each page only (the task's setting, 20 by default):
typing a record's fields costs about as much as filtering, keying and encoding it (the top level decoded as
``dict[str, msgspec.Raw]``, each value typed by its first byte; ``bench/drift_bench.py``), so every count here is of
*sampled* records (``sampled_records``), not of all records.

A source decides the field names, so what is kept of them is bounded: a profile names at most :data:`MAX_FIELDS`
fields (those most records held; the rest are counted together under :data:`OTHER`, by type), each name at most
:data:`MAX_NAME_CHARS` characters, and a drift report lists at most :data:`MAX_LISTED` changes of each kind (with
how many more there were). A run record, the baseline, a chunk's XCom and the status view stay small, whatever the
records carry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import msgspec

# The types a JSON value can have, as JSON Schema names them (an integer is a number without a fraction or exponent).
JSON_TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")
# A published value that is not a JSON object is profiled as this one field (its root); one that does not decode as
# JSON at all (never expected: every published value was decoded or encoded as JSON) has the type ``invalid``.
ROOT = "$"
INVALID = "invalid"
# Published records profiled per page (per batch), from its first one: the default of the task's ``drift_sample``.
SAMPLE_PER_PAGE = 20
#: Fields a profile names; the others are counted together under OTHER.
MAX_FIELDS = 500
#: A longer field name is cut to this many characters (and an ellipsis).
MAX_NAME_CHARS = 200
#: The fields past MAX_FIELDS, counted together by type.
OTHER = "(other fields)"
#: Changes of each kind a drift report lists.
MAX_LISTED = 50

_FIRST_BYTE = {
    ord('"'): "string",
    ord("{"): "object",
    ord("["): "array",
    ord("t"): "boolean",
    ord("f"): "boolean",
    ord("n"): "null",
}
_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_any_value = msgspec.json.Decoder(msgspec.Raw).decode


def json_type(text: bytes) -> str:
    """The JSON type of a value's text (as msgspec slices it: no leading whitespace)."""
    found = _FIRST_BYTE.get(text[0]) if text else None
    if found is not None:
        return found
    return "number" if b"." in text or b"e" in text or b"E" in text else "integer"


@dataclass(frozen=True)
class FieldProfile:
    """How many records were profiled and, per top-level field, how many of them held it with each JSON type.

    Profiles add up with ``+`` (the counts of each field and type add; a field or type absent from one counts 0).

    :param sampled_records: the records profiled.
    :param fields: field name -> JSON type -> records holding the field with that type.
    """

    sampled_records: int = 0
    fields: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def __add__(self, other: FieldProfile) -> FieldProfile:
        merged: dict[str, dict[str, int]] = {name: dict(types) for name, types in self.fields.items()}
        for name, types in other.fields.items():
            into = merged.setdefault(name, {})
            for kind, n in types.items():
                into[kind] = into.get(kind, 0) + n
        return FieldProfile(self.sampled_records + other.sampled_records, bounded(merged))

    def __bool__(self) -> bool:
        return self.sampled_records > 0

    def types(self, name: str) -> list[str]:
        """The types ``name`` was seen with, in :data:`JSON_TYPES` order."""
        return ordered(self.fields.get(name, {}))

    def held(self, name: str) -> int:
        """How many profiled records held ``name`` (with any type)."""
        return sum(self.fields.get(name, {}).values())

    def to_json(self) -> dict[str, Any]:
        return {"sampled_records": self.sampled_records, "fields": {k: dict(v) for k, v in self.fields.items()}}

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> FieldProfile:
        """The profile of :meth:`to_json`'s form (None or empty: no records)."""
        if not value:
            return cls()
        fields: dict[str, dict[str, int]] = {}
        for k, v in (value.get("fields") or {}).items():
            into = fields.setdefault(field_name(str(k)), {})
            for t, n in v.items():
                into[str(t)] = into.get(str(t), 0) + int(n)
        return cls(int(value.get("sampled_records") or 0), bounded(fields))

    def compare(self, run: FieldProfile, sample_per_page: int = SAMPLE_PER_PAGE) -> Drift:
        """The drift of ``run`` against this profile, the baseline. Without a baseline (no record profiled yet) the run
        is the baseline; a run that profiled no record misses nothing."""
        if not self:
            return Drift(True, run.sampled_records, sample_per_page)
        new = tuple(NewField(name, dict(run.fields[name])) for name in sorted(run.fields) if name not in self.fields)
        missing = tuple(
            MissingField(name, tuple(self.types(name)), self.held(name), self.sampled_records)
            for name in sorted(self.fields)
            if run and name not in run.fields
        )
        retyped = tuple(
            RetypedField(name, tuple(self.types(name)), kind, run.fields[name][kind])
            for name in sorted(run.fields)
            if name in self.fields
            for kind in run.types(name)
            if kind not in self.fields[name]
        )
        unlisted = sum(max(0, len(found) - MAX_LISTED) for found in (new, missing, retyped))
        return Drift(
            False,
            run.sampled_records,
            sample_per_page,
            new[:MAX_LISTED],
            missing[:MAX_LISTED],
            retyped[:MAX_LISTED],
            unlisted,
        )


def field_name(name: str) -> str:
    """A field name as a profile keeps it: at most :data:`MAX_NAME_CHARS` characters."""
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "…"


def bounded(fields: dict[str, dict[str, int]], most: int = MAX_FIELDS) -> dict[str, dict[str, int]]:
    """``fields`` with at most ``most`` names: those most records held (then by name), the rest counted together
    under :data:`OTHER`, type by type (as ``include/sql/add_run_counts.sql`` merges a run's batches)."""
    if len(fields) <= most:
        return fields
    named = sorted((n for n in fields if n != OTHER), key=lambda n: (-sum(fields[n].values()), n))
    kept = {name: fields[name] for name in named[:most]}
    other = dict(fields.get(OTHER, {}))
    for name in named[most:]:
        for kind, n in fields[name].items():
            other[kind] = other.get(kind, 0) + n
    kept[OTHER] = other
    return kept


def ordered(types: Iterable[str]) -> list[str]:
    rank = {kind: i for i, kind in enumerate((*JSON_TYPES, INVALID))}
    return sorted(types, key=lambda kind: (rank.get(kind, len(rank)), kind))


def profile_values(values: Iterable[bytes | msgspec.Raw], sample: int | None = SAMPLE_PER_PAGE) -> FieldProfile:
    """The profile of the first ``sample`` of ``values`` (None: all), each a published message's JSON value.

    Only the top level is decoded, into slices of the value's text; nothing below it is built.
    """
    counts: Counter[tuple[str, str]] = Counter()
    first_byte = _FIRST_BYTE.get
    records = 0
    for value in islice(values, sample):
        records += 1
        try:
            top = _top_level(value)
        except msgspec.DecodeError:
            counts[ROOT, root_type(value)] += 1
            continue
        for name, raw in top.items():
            text = bytes(raw)
            counts[field_name(name), first_byte(text[0]) or json_type(text)] += 1
    fields: dict[str, dict[str, int]] = {}
    for (name, kind), n in counts.items():
        fields.setdefault(name, {})[kind] = n
    return FieldProfile(records, bounded(fields))


def root_type(value: bytes | msgspec.Raw) -> str:
    """The type of a value that is not a JSON object (``invalid`` when it is no JSON)."""
    try:
        return json_type(bytes(_any_value(value)))
    except msgspec.DecodeError:
        return INVALID


@dataclass(frozen=True)
class NewField:
    """A field the baseline never held: the types it came with, and in how many sampled records."""

    name: str
    types: Mapping[str, int]

    @property
    def sampled_records(self) -> int:
        return sum(self.types.values())

    def to_json(self) -> dict[str, Any]:
        return {"field": self.name, "types": dict(self.types), "sampled_records": self.sampled_records}

    def describe(self) -> str:
        return f"new field {self.name} ({'|'.join(ordered(self.types))}, {self.sampled_records} sampled records)"


@dataclass(frozen=True)
class MissingField:
    """A baseline field no sampled record of the run held; how many baseline records held it, of how many."""

    name: str
    baseline_types: tuple[str, ...]
    baseline_records: int
    baseline_sampled: int

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.name,
            "baseline_types": list(self.baseline_types),
            "baseline_records": self.baseline_records,
            "baseline_sampled_records": self.baseline_sampled,
        }

    def describe(self) -> str:
        return (
            f"missing field {self.name} ({'|'.join(self.baseline_types)}; in {self.baseline_records} of "
            f"{self.baseline_sampled} baseline records)"
        )


@dataclass(frozen=True)
class RetypedField:
    """A baseline field the run's records held with a type the baseline never saw (one entry per new type)."""

    name: str
    old: tuple[str, ...]
    new: str
    sampled_records: int

    def to_json(self) -> dict[str, Any]:
        return {"field": self.name, "from": list(self.old), "to": self.new, "sampled_records": self.sampled_records}

    def describe(self) -> str:
        return f"retyped {self.name} {'|'.join(self.old)}→{self.new} ({self.sampled_records} sampled records)"


@dataclass(frozen=True)
class Drift:
    """How a run's published fields differ from the task's baseline.

    :param baseline: no earlier successful run profiled a record: this run's profile starts the baseline, and no
        drift is reported.
    :param sampled_records: the run's records profiled.
    :param sample_per_page: the published records profiled per page, from its first.
    :param unlisted: the changes found past the :data:`MAX_LISTED` listed of each kind.
    """

    baseline: bool
    sampled_records: int
    sample_per_page: int = SAMPLE_PER_PAGE
    new: tuple[NewField, ...] = ()
    missing: tuple[MissingField, ...] = ()
    retyped: tuple[RetypedField, ...] = ()
    unlisted: int = 0

    @property
    def drifted(self) -> bool:
        return bool(self.new or self.missing or self.retyped or self.unlisted)

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.describe(),
            "baseline": self.baseline,
            "sampled_records": self.sampled_records,
            "sample_per_page": self.sample_per_page,
            "new": [f.to_json() for f in self.new],
            "missing": [f.to_json() for f in self.missing],
            "retyped": [f.to_json() for f in self.retyped],
            "unlisted": self.unlisted,
        }

    def describe(self) -> str:
        """One line for a person: ``drift: new field foo (string, 120 sampled records); retyped bar ...``."""
        if self.sample_per_page == 0:
            return "drift: not profiled (drift_sample is 0)"
        if self.baseline:
            return f"drift: baseline ({self.sampled_records} sampled records); nothing to compare with yet"
        if not self.drifted:
            return f"drift: none ({self.sampled_records} sampled records)"
        changes = [f.describe() for f in self.new] + [f.describe() for f in self.missing]
        more = [f"and {self.unlisted} more changes not listed"] if self.unlisted else []
        return "drift: " + "; ".join(changes + [f.describe() for f in self.retyped] + more)
