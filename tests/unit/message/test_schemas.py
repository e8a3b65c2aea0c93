"""Unit tests of crawler_ops.message.schemas: JSON Schema and Avro inferred from sample records."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.message.schemas import (
    avro_name,
    avro_names,
    avro_schema,
    incompatible_fields,
    json_schema,
    json_schema_breaks,
)

PROPERTY = settings(max_examples=200, deadline=None)
AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SAMPLES = [
    {"id": 1, "Collect_time": "2026-11-20", "时间": "10:11", "price": 1.5, "ok": True, "tags": ["a"], "shop": {"n": 1}},
    {"id": 2, "Collect_time": "2026-11-21", "时间": None, "price": 2, "ok": False, "tags": [], "shop": {"n": 2}},
    {"id": 3, "Collect_time": "2026-11-22", "price": 3.0, "ok": True, "tags": ["b", "c"], "shop": {"n": 3, "x": "y"}},
]


def avro_valid(value: Any, avro_type: Any, original: bool = True) -> bool:
    """Whether ``value`` (keys renamed by the schema's field docs) is a datum of ``avro_type``."""
    if isinstance(avro_type, list):
        return any(avro_valid(value, branch) for branch in avro_type)
    name = avro_type["type"] if isinstance(avro_type, dict) else avro_type
    if name == "record":
        if not isinstance(value, dict):
            return False
        fields = {f.get("doc", f["name"]): f for f in avro_type["fields"]}
        if set(value) - set(fields):
            return False
        return all(avro_valid(value[key], f["type"]) if key in value else "default" in f for key, f in fields.items())
    if name == "array":
        return isinstance(value, list) and all(avro_valid(v, avro_type["items"]) for v in value)
    checks = {
        "null": lambda v: v is None,
        "boolean": lambda v: isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
    }
    return checks[name](value)


def all_names(schema: Any) -> list[str]:
    if isinstance(schema, list):
        return [n for branch in schema for n in all_names(branch)]
    if not isinstance(schema, dict):
        return []
    if schema["type"] == "record":
        return [schema["name"]] + [n for f in schema["fields"] for n in [f["name"], *all_names(f["type"])]]
    if schema["type"] == "array":
        return all_names(schema["items"])
    return []


def test_json_schema_types_required_and_nesting():
    schema = json_schema(SAMPLES)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    props = schema["properties"]
    assert props["id"] == {"type": "integer"}
    assert props["price"] == {"type": "number"}
    assert props["ok"] == {"type": "boolean"}
    assert props["时间"] == {"type": ["null", "string"]}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["shop"]["required"] == ["n"]
    assert schema["required"] == ["Collect_time", "id", "ok", "price", "shop", "tags"]
    jsonschema.Draft7Validator.check_schema(schema)
    for record in SAMPLES:
        jsonschema.validate(record, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**SAMPLES[0], "id": "one"}, schema)


def test_avro_optional_fields_are_nullable_with_default_null():
    fields = {f["name"]: f for f in avro_schema(SAMPLES)["fields"]}
    assert fields["id"] == {"name": "id", "type": "long"}
    chinese = {"name": "_u65f6_u95f4", "type": ["null", "string"], "default": None, "doc": "时间"}
    assert fields["_u65f6_u95f4"] == chinese
    assert fields["price"]["type"] == ["long", "double"]
    shop = fields["shop"]["type"]
    assert shop["type"] == "record"
    assert {f["name"]: f for f in shop["fields"]}["x"] == {"name": "x", "type": ["null", "string"], "default": None}
    assert fields["tags"]["type"] == {"type": "array", "items": "string"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Collect_time", "Collect_time"), ("时间", "_u65f6_u95f4"), ("page-size", "page_u002dsize"), ("1st", "_1st")],
)
def test_avro_name_rule(name, expected):
    assert avro_name(name) == expected


def test_avro_names_number_clashes():
    assert avro_names(["a-b", "a_u002db"]) == {"a_u002db": "a-b", "a_u002db_2": "a_u002db"}


def test_incompatible_fields_name_each_break_in_words():
    old = avro_schema(SAMPLES)
    new = avro_schema([{**r, "id": str(r["id"]), "added": 1} for r in SAMPLES])
    assert incompatible_fields(old, new) == [
        "id was long and is now string, which cannot hold an old long value",
        "added is new and has no default, so records written before it cannot be read",
    ]
    assert incompatible_fields(old, avro_schema([*SAMPLES, {"id": 4, "more": "x"}])) == []


def test_incompatible_fields_look_into_nested_records():
    old = avro_schema([{"shop": {"n": 1}}])
    new = avro_schema([{"shop": {"n": True}}])
    assert incompatible_fields(old, new) == ["shop.n was long and is now boolean, which cannot hold an old long value"]


def test_no_records_is_an_error():
    with pytest.raises(ValueError, match="no sample records"):
        avro_schema([])


scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text())
keys = st.text(min_size=1, max_size=8)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=8
)
records = st.lists(st.dictionaries(keys, values, max_size=5), min_size=1, max_size=5)


@PROPERTY
@given(records)
def test_every_sample_fits_both_inferred_schemas(samples):
    schema = json_schema(samples)
    jsonschema.Draft7Validator.check_schema(schema)
    for record in samples:
        jsonschema.validate(record, schema)
    avro = avro_schema(samples)
    assert all(AVRO_NAME.fullmatch(n) for n in all_names(avro))
    for record in samples:
        assert avro_valid(record, avro)
    assert incompatible_fields(avro, avro) == []


@PROPERTY
@given(st.lists(keys, unique=True, max_size=10))
def test_avro_names_are_valid_distinct_and_map_back(names):
    mapping = avro_names(names)
    assert sorted(mapping.values()) == sorted(names)
    assert all(AVRO_NAME.fullmatch(n) for n in mapping)


def renamed(value: Any, avro_type: Any) -> Any:
    """``value`` with the keys of its records renamed to the Avro names of ``avro_type`` (None fills absent ones)."""
    for branch in avro_type if isinstance(avro_type, list) else [avro_type]:
        if not avro_valid(value, branch):
            continue
        name = branch["type"] if isinstance(branch, dict) else branch
        if name == "record":
            return {f["name"]: renamed(value.get(f.get("doc", f["name"])), f["type"]) for f in branch["fields"]}
        if name == "array":
            return [renamed(v, branch["items"]) for v in value]
        return value
    raise AssertionError(f"{value!r} fits no branch of {avro_type!r}")


@PROPERTY
@given(records)
def test_records_encoded_with_fastavro_decode_back_equal(samples):
    fastavro = pytest.importorskip("fastavro")
    import io

    schema = avro_schema(samples)
    parsed = fastavro.parse_schema(schema)
    expected = [renamed(record, schema) for record in samples]
    buffer = io.BytesIO()
    fastavro.writer(buffer, parsed, expected)
    buffer.seek(0)
    assert list(fastavro.reader(buffer)) == expected


def test_json_schema_breaks_name_each_field_in_words():
    old = json_schema(SAMPLES)
    new = json_schema([{**r, "id": str(r["id"]), "added": 1, "shop": {"n": True}} for r in SAMPLES])
    assert json_schema_breaks(old, new) == [
        "added is new and required, so records written before without it are rejected",
        "id was integer and is now string, which rejects an old integer value",
        "shop.n was integer and is now boolean, which rejects an old integer value",
    ]
    assert json_schema_breaks(json_schema([{"tags": [1]}]), json_schema([{"tags": ["a"]}])) == [
        "tags[] was integer and is now string, which rejects an old integer value"
    ]


def test_json_schema_breaks_allow_widening_and_refuse_narrowing():
    integers, numbers = json_schema([{"x": 1}]), json_schema([{"x": 1.5}])
    assert json_schema_breaks(integers, numbers) == [], "an integer is a number"
    assert json_schema_breaks(numbers, integers) == [
        "x was number and is now integer, which rejects an old number value"
    ]
    optional = json_schema([{"x": 1}, {}])
    assert json_schema_breaks(optional, integers) == [
        "x is now required, so records written before without it are rejected"
    ]
    assert json_schema_breaks(integers, optional) == []
    assert json_schema_breaks(integers, {"type": "object"}) == [], "a schema naming no property accepts them all"


def test_a_new_property_breaks_an_open_schema_and_a_dropped_one_a_closed_one():
    old = json_schema([{"id": 1}])
    assert json_schema_breaks(old, json_schema([{"id": 1}, {"id": 2, "city": "x"}])) == [
        "city is new, and the old schema let a record hold city with any value, which this one may reject"
    ]
    closed = {**old, "additionalProperties": False}
    assert json_schema_breaks(closed, {**json_schema([{"id": 1}, {"id": 2, "city": "x"}])}) == []
    assert json_schema_breaks(json_schema([{"id": 1, "city": "x"}]), closed) == [
        "city is gone and no other property is allowed, so old records holding it are rejected"
    ]


@st.composite
def revised(draw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Samples, and the same records with some values replaced by others (of any type): what a source that changed
    some fields' types sends."""
    old = draw(records)
    new = [{k: draw(values) if draw(st.booleans()) else v for k, v in r.items()} for r in old]
    return old, new


@PROPERTY
@given(records, records)
def test_closed_schemas_hold_their_samples_and_evolve_by_optional_properties(samples, more):
    closed = json_schema(samples, closed=True)
    jsonschema.Draft7Validator.check_schema(closed)
    for record in samples:
        jsonschema.validate(record, closed)
    extra = {k: v for r in more for k, v in r.items() if all(k not in s for s in samples)}
    if extra:  # a record with a property none of the samples had is refused
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**samples[0], **extra}, closed)


def test_a_closed_schema_may_gain_an_optional_property_but_not_an_open_one():
    samples = [{"id": 1, "shop": {"n": 1}}]
    grown = [*samples, {"id": 2, "city": "x", "shop": {"n": 2, "m": True}}]
    assert json_schema_breaks(json_schema(samples, closed=True), json_schema(grown, closed=True)) == []
    assert json_schema_breaks(json_schema(samples), json_schema(grown)) == [
        "shop.m is new, and the old schema let a record hold m with any value, which this one may reject",
        "city is new, and the old schema let a record hold city with any value, which this one may reject",
    ]


@PROPERTY
@given(revised(), records)
def test_json_schema_breaks_are_sound(pair, more):
    old_samples, new_samples = pair
    for new in (json_schema(new_samples), json_schema([*old_samples, *more])):
        assert json_schema_breaks(new, new) == []
        if not json_schema_breaks(json_schema(old_samples), new):
            for record in old_samples:  # no break named: every record the old schema was inferred from still fits
                jsonschema.validate(record, new)
