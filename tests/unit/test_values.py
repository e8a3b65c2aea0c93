"""Framed values for a Schema Registry: a record the schema accepts is written (JSON text as sent, or Avro that reads
back to the record), one it does not is refused naming where; widened schemas accept old and new records and break
nothing the registry checks."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.schemas import (
    avro_names,
    avro_schema,
    incompatible_fields,
    json_schema,
    json_schema_breaks,
    widen_avro_schema,
    widen_json_schema,
)
from crawler_ops.values import Misfit, ValueCodec, check_value_schema, framed, json_name, unframed

RECORDS = [
    {"id": "1", "aae397": "2026-01-01", "n": 3, "时间": "x", "tags": ["a"], "o": {"p": 1.5}},
    {"id": "2", "aae397": None, "n": 4, "tags": [], "o": {"p": 2}},
]


def raw(record: dict[str, Any]) -> bytes:
    return msgspec.json.encode(record)


def avro_read(schema: dict[str, Any], value: bytes) -> tuple[int, Any]:
    schema_id, payload = unframed(value)
    return schema_id, fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(schema))


def test_json_schema_value_is_the_frame_then_the_json_text_as_sent() -> None:
    codec = ValueCodec("json_schema", 258, json_schema(RECORDS, closed=True))
    for record in RECORDS:
        text = raw(record)
        assert codec.encode_raw(msgspec.Raw(text)) == b"\x00\x00\x00\x01\x02" + text
        assert codec.encode(record) == framed(258) + text


@pytest.mark.parametrize("value_format", ["json_schema", "avro"])
@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({**RECORDS[1], "salary": 1}, "field 'salary' is not in the schema"),
        ({**RECORDS[1], "id": 2}, "Expected `str`, got `int` - at `$.id`"),
        ({k: v for k, v in RECORDS[1].items() if k != "n"}, "required field 'n' is missing"),
        ({**RECORDS[1], "o": {"p": 1, "q": 2}}, "field 'q' in $.o is not in the schema"),
        ({**RECORDS[1], "tags": ["a", 3]}, "Expected `str`, got `int` - at `$.tags[1]`"),
    ],
)
def test_a_record_the_schema_does_not_accept_is_refused_naming_where(
    value_format: str, record: dict[str, Any], why: str
) -> None:
    schema = json_schema(RECORDS, closed=True) if value_format == "json_schema" else avro_schema(RECORDS, "t")
    codec = ValueCodec(value_format, 1, schema)  # type: ignore[arg-type]
    with pytest.raises(Misfit) as raw_error:
        codec.encode_raw(raw(record))
    assert str(raw_error.value) == why
    with pytest.raises(Misfit) as decoded_error:
        codec.encode(record)
    assert str(decoded_error.value) == why


def test_avro_value_reads_back_with_the_fields_renamed_as_the_schema_says() -> None:
    schema = avro_schema(RECORDS, "jobs")
    codec = ValueCodec("avro", 9, schema)
    names = {field["name"]: json_name(field) for field in schema["fields"]}
    for record in RECORDS:
        schema_id, read = avro_read(schema, codec.encode_raw(raw(record)))
        assert schema_id == 9
        assert {names[k]: v for k, v in read.items() if v is not None or names[k] in record} == record


def test_a_json_schema_beyond_msgspec_types_is_checked_by_jsonschema() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[0-9]+$"}}}
    codec = ValueCodec("json_schema", 1, schema)
    assert codec.encode_raw(b'{"id":"12"}') == framed(1) + b'{"id":"12"}'
    with pytest.raises(Misfit, match=r"does not match .* - at `\$.id`"):
        codec.encode_raw(b'{"id":"x1"}')


def test_an_open_object_accepts_fields_it_does_not_name() -> None:
    codec = ValueCodec("json_schema", 1, json_schema(RECORDS, closed=False))
    assert codec.encode({**RECORDS[0], "salary": 1}).startswith(framed(1))


@pytest.mark.parametrize(
    ("value_format", "schema", "why"),
    [
        ("avro", {"type": "enum", "name": "e", "symbols": ["a"]}, "must be a record schema"),
        ("avro", {"type": "record", "name": "r", "fields": [{"name": "b", "type": "bytes"}]}, "cannot be used"),
        ("avro", {"type": "record", "name": "r", "fields": [{"name": "b", "type": "nope"}]}, "cannot be used"),
        ("json_schema", {"type": "objekt"}, "not a valid JSON Schema"),
    ],
)
def test_a_schema_that_cannot_write_json_records_is_refused(value_format: str, schema: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_value_schema(value_format, schema)  # type: ignore[arg-type]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**62), 2**62),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=5),
)
names = st.sampled_from(["id", "aae397", "Collect_time", "时间", "page-size", "n"])
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3), max_leaves=6
)
records = st.dictionaries(names, values, max_size=5)


def fits(codec: ValueCodec, record: dict[str, Any]) -> bool:
    try:
        codec.encode(record)
    except Misfit:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(st.lists(records, min_size=1, max_size=4), st.lists(records, min_size=1, max_size=4))
def test_a_widened_schema_accepts_old_and_new_records_and_breaks_nothing(
    old: list[dict[str, Any]], new: list[dict[str, Any]]
) -> None:
    """Inferred schemas accept their samples; widening with other records accepts both sets, and the registry's
    BACKWARD rule names no break (so `evolve` registers a compatible version). Avro only where Avro can hold the
    samples (a union of two record or two array types cannot be written)."""
    base = json_schema(old, closed=True)
    wider = widen_json_schema(base, new)
    codec = ValueCodec("json_schema", 1, wider)
    assert all(fits(codec, record) for record in old + new)
    assert json_schema_breaks(base, wider) == []
    try:
        avro_base = avro_schema(old, "t")
        avro_wider = widen_avro_schema(avro_base, new)
        avro_codec = ValueCodec("avro", 1, avro_wider)
    except (TypeError, ValueError):
        return  # msgspec refuses the union (or fastavro the names): a schema the plan would refuse too
    assert incompatible_fields(avro_base, avro_wider) == []
    for record in old + new:
        _, read = avro_read(avro_wider, avro_codec.encode(record))
        assert set(read) == set(avro_names_of(avro_wider))


def avro_names_of(schema: dict[str, Any]) -> list[str]:
    return [field["name"] for field in schema["fields"]]


def test_widening_a_closed_schema_keeps_it_closed_and_new_fields_optional() -> None:
    base = json_schema(RECORDS, closed=True)
    wider = widen_json_schema(base, [{**RECORDS[0], "salary": 5}])
    assert wider["additionalProperties"] is False
    assert "salary" in wider["properties"] and "salary" not in wider.get("required", ())
    avro = widen_avro_schema(avro_schema(RECORDS, "t"), [{**RECORDS[0], "salary": 5}])
    salary = next(field for field in avro["fields"] if field["name"] == "salary")
    assert salary == {"name": "salary", "type": ["null", "long"], "default": None}
    assert avro_names(["时间"]) == {"_u65f6_u95f4": "时间"}


def json_names_back(value: Any, schema: Any) -> Any:
    """A value fastavro read, with every record's fields named as the record names them (the oracle's view)."""
    branches = schema if isinstance(schema, list) else [schema]
    if isinstance(value, dict):
        record = next(b for b in branches if isinstance(b, dict) and b.get("type") == "record")
        types = {f["name"]: f["type"] for f in record["fields"]}
        names = {f["name"]: json_name(f) for f in record["fields"]}
        return {names[k]: json_names_back(v, types[k]) for k, v in value.items()}
    if isinstance(value, list):
        array = next(b for b in branches if isinstance(b, dict) and b.get("type") == "array")
        return [json_names_back(item, array["items"]) for item in value]
    return value


def without_nulls(value: Any) -> Any:
    """Absent and null are one thing to an Avro record with default-null fields."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


@settings(max_examples=200, deadline=None)
@given(st.lists(records, min_size=1, max_size=4), st.booleans())
def test_avro_values_read_back_by_fastavro_to_the_records(samples: list[dict[str, Any]], loose: bool) -> None:
    """crawler_ops writes Avro's binary encoding itself: fastavro, the reference reader, reads every value back to
    its record (fields named as the record names them; absent and null alike)."""
    schema = avro_schema(samples, "t", loose=loose)
    try:
        codec = ValueCodec("avro", 3, schema)
    except (TypeError, ValueError):
        return  # a union msgspec cannot decode into (two record or two array types): check_value_schema refuses it
    for record in samples:
        schema_id, read = avro_read(schema, codec.encode_raw(raw(record)))
        assert schema_id == 3
        assert without_nulls(json_names_back(read, schema)) == without_nulls(record)


def test_a_long_beyond_64_bits_and_an_int_beyond_32_bits_do_not_fit() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}, {"name": "i", "type": "int"}]}
    codec = ValueCodec("avro", 1, schema)
    assert avro_read(schema, codec.encode({"n": -(2**63), "i": 2**31 - 1}))[1] == {"n": -(2**63), "i": 2**31 - 1}
    with pytest.raises(Misfit, match="does not fit Avro's 64-bit long"):
        codec.encode({"n": 2**63, "i": 0})
    with pytest.raises(Misfit, match="does not fit Avro's 32-bit int"):
        codec.encode({"n": 0, "i": 2**31})
