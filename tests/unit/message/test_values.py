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

from crawler_ops.message.schemas import (
    avro_names,
    avro_schema,
    incompatible_fields,
    json_schema,
    json_schema_breaks,
    widen_avro_schema,
    widen_json_schema,
)
from crawler_ops.message.values import (
    Misfit,
    Unsupported,
    ValueCodec,
    avro_type,
    check_value_schema,
    framed,
    json_name,
    json_type,
    unframed,
)

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


# --- every Avro type, byte for byte against fastavro's writer ------------------------------------------------------

POINT = {"type": "record", "name": "point", "fields": [{"name": "x", "type": "double"}]}
ALL_TYPES = {
    "type": "record",
    "name": "all",
    "namespace": "ns",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "colour", "symbols": ["red", "green", "blue"]}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {"name": "a", "type": {"type": "array", "items": POINT}},
        {"name": "p", "type": ["null", "point"], "default": None},
        {
            "name": "in_union",
            "type": ["null", {"type": "record", "name": "tag", "fields": [{"name": "t", "type": "string"}]}],
            "default": None,
        },
        {"name": "tag_again", "type": ["null", "ns.tag"], "default": None},
        {
            "name": "dotted",
            "type": {
                "type": "record",
                "name": "other.space.box",
                "fields": [
                    {
                        "name": "inner",
                        "type": {"type": "record", "name": "lid", "fields": [{"name": "w", "type": "long"}]},
                    }
                ],
            },
        },
        {
            "name": "crate",
            "type": {
                "type": "record",
                "name": "other.space.crate",
                "fields": [{"name": "box_short", "type": ["null", "box"], "default": None}],
            },
        },
        {"name": "lid_full", "type": ["null", "other.space.lid"], "default": None},
        {"name": "opt_long", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
        {"name": "q", "type": ["null", "ns.point"], "default": None},
        {"name": "u", "type": ["null", "long", "string", {"type": "map", "values": "string"}], "default": None},
        {"name": "o", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "dflt", "type": "string", "default": "fallback"},
        {"name": "_u65f6_u95f4", "type": "string", "doc": "时间"},
        {"name": "a_u002db", "type": "string", "doc": "a-b"},
        {"name": "a_u002db_2", "type": "string", "doc": "a_u002db"},
        {"name": "note", "type": "string", "doc": "free text about the field"},
    ],
}
LONGS = [0, 1, -1, -64, 63, 64, 16_383, 16_384, -16_385, 2**62, -(2**63), 2**63 - 1]


def all_types_record(n: int) -> dict[str, Any]:
    """Record ``n`` of ALL_TYPES as JSON gives it (the record's own names), exercising each boundary in turn."""
    big = "文" * (16_384 // 3) + "x" * (n % 3)  # UTF-8 lengths around the 16,384 of the varint table
    record = {
        "b": n % 2 == 0,
        "i": [-(2**31), 2**31 - 1, 0, 7][n % 4],
        "l": LONGS[n % len(LONGS)],
        "f": 1.5 * n,
        "d": -0.25 * n,
        "s": ["", "ascii", "北京", big][n % 4],
        "e": ["red", "green", "blue"][n % 3],
        "m": {} if n % 2 else {"a": n, "b": -n},
        "a": [{"x": float(k)} for k in range(n % 3)],
        "p": None if n % 2 else {"x": 2.5},
        "q": {"x": -1.0} if n % 2 else None,
        "u": [None, n, "text", {"k": "v"}][n % 4],
        "o": [None, "", "文" * 5461 + "x"][n % 3],  # 16,384 bytes: just past the varint table
        "in_union": None if n % 2 else {"t": "tagged"},
        "tag_again": {"t": "again"} if n % 2 else None,
        "dotted": {"inner": {"w": n}},
        "crate": {"box_short": {"inner": {"w": -n}} if n % 3 == 0 else None},
        "lid_full": {"w": 5} if n % 3 == 1 else None,
        "opt_long": [None, 0, 16_384][n % 3],
        "ts": 1_780_000_000_000 + n,
        "时间": "2026-11-01",
        "a-b": "dash",
        "a_u002db": "spelled out",
        "note": "n",
    }
    if n % 2:
        record["dflt"] = "given"
    return record


def as_avro(record: dict[str, Any]) -> dict[str, Any]:
    """The dict fastavro's writer takes for a record of ALL_TYPES: Avro names, defaults filled in."""
    out = {k: v for k, v in record.items() if k not in ("时间", "a-b", "a_u002db")}
    out |= {"_u65f6_u95f4": record["时间"], "a_u002db": record["a-b"], "a_u002db_2": record["a_u002db"]}
    out.setdefault("dflt", "fallback")
    return out


@pytest.mark.parametrize("n", range(24))
def test_every_avro_type_is_written_byte_for_byte_as_fastavro_writes_it(n: int) -> None:
    record = all_types_record(n)
    codec = ValueCodec("avro", 5, ALL_TYPES)
    expected = io.BytesIO()
    fastavro.schemaless_writer(expected, fastavro.parse_schema(ALL_TYPES), as_avro(record))
    assert codec.encode_raw(raw(record)) == framed(5) + expected.getvalue()
    assert codec.encode(record) == framed(5) + expected.getvalue()


def test_an_enum_symbol_or_a_type_the_schema_does_not_have_is_a_misfit() -> None:
    codec = ValueCodec("avro", 5, ALL_TYPES)
    with pytest.raises(Misfit, match=r"^Invalid enum value 'purple' - at `\$.e`$"):
        codec.encode({**all_types_record(0), "e": "purple"})
    with pytest.raises(Misfit, match=r"got `array` - at `\$.u`"):
        codec.encode({**all_types_record(0), "u": [1]})
    with pytest.raises(Misfit, match=r"^Expected `int`, got `float` - at `\$.m\[...\]`$"):
        codec.encode({**all_types_record(0), "m": {"a": 1.5}})


def test_a_float_beyond_float32_is_a_misfit() -> None:
    with pytest.raises(Misfit, match=r"^cannot be written as Avro: float too large to pack"):
        ValueCodec("avro", 5, ALL_TYPES).encode({**all_types_record(0), "f": 1e300})


def test_a_union_writer_refuses_a_value_none_of_its_branches_takes() -> None:
    _, write = avro_type(["null", "long", "string"], {})
    with pytest.raises(ValueError, match=r"^no branch of the union takes a list$"):
        write(bytearray(), [1])


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ("bytes", "Avro type 'bytes' cannot be written from JSON"),
        ("nowhere.defined", "Avro type 'nowhere.defined' cannot be written from JSON"),
        ({"type": "fixed", "name": "f", "size": 4}, "Avro type 'fixed' cannot be written from JSON"),
        ({"type": "bytes", "logicalType": "decimal"}, "Avro type 'bytes' cannot be written from JSON"),
    ],
)
def test_an_avro_type_json_cannot_fill_is_unsupported(schema: Any, why: str) -> None:
    with pytest.raises(Unsupported) as caught:
        avro_type(schema, {})
    assert str(caught.value) == why


@pytest.mark.parametrize(
    ("field", "name"),
    [
        ({"name": "_u65f6_u95f4", "doc": "时间"}, "时间"),
        ({"name": "_u65f6_u95f4_12", "doc": "时间"}, "时间"),
        ({"name": "_u65f6_u95f4_x", "doc": "时间"}, "_u65f6_u95f4_x"),
        ({"name": "page_u002dsize", "doc": "page-size"}, "page-size"),
        ({"name": "salary", "doc": "the salary, in yuan"}, "salary"),
        ({"name": "salary", "doc": "salary"}, "salary"),
        ({"name": "salary", "doc": ""}, "salary"),
        ({"name": "salary", "doc": 5}, "salary"),
        ({"name": "salary"}, "salary"),
    ],
)
def test_a_field_is_named_by_its_doc_only_when_its_avro_name_was_made_from_it(field: dict[str, Any], name: str) -> None:
    assert json_name(field) == name


# --- JSON Schema: what compiles to msgspec types, what falls back to jsonschema -----------------------------------


@pytest.mark.parametrize(
    ("schema", "fits", "misfit", "why"),
    [
        # compiled: msgspec's words
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            {"a": 1},
            {"a": "x"},
            "Expected `int`, got `str` - at `$[...]`",
        ),
        ({"type": "object"}, {"x": [1]}, 5, "Expected `object`, got `int`"),
        ({"type": "array"}, [1, "a", None], "x", "Expected `array`, got `str`"),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, 1, 1.5, "Expected `int | str`, got `float`"),
        ({"type": ["string", "null"]}, None, 1, "Expected `str | null`, got `int`"),
        (
            {
                "type": "object",
                "properties": {
                    "o": {
                        "type": "object",
                        "properties": {"p": {"type": "integer"}},
                        "required": ["p"],
                        "additionalProperties": False,
                    }
                },
            },
            {"o": {"p": 1}},
            {"o": {}},
            "required field 'p' in $.o is missing",
        ),
        # jsonschema's words: two object branches are a union msgspec cannot decode into
        (
            {"anyOf": [{"type": "object", "properties": {"a": {}}}, {"type": "object", "properties": {"b": {}}}]},
            {"a": 1},
            5,
            "5 is not valid under any of the given schemas - at `$`",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
            {"a": "s", "b": 1},
            {"b": "x"},
            "'x' is not of type 'integer' - at `$.b`",
        ),
        ({"type": "object", "properties": {}, "required": ["a"]}, {"a": 1}, {}, "'a' is a required property - at `$`"),
        (
            {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string", "maxLength": 2}}}},
            {"l": ["ab"]},
            {"l": ["ab", "abc"]},
            "'abc' is too long - at `$.l[1]`",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
            {"n": 0},
            {"n": -1},
            "-1 is less than the minimum of 0 - at `$.n`",
        ),
    ],
)
def test_a_json_schema_is_checked_in_msgspec_types_or_else_by_jsonschema(
    schema: dict[str, Any], fits: Any, misfit: Any, why: str
) -> None:
    codec = ValueCodec("json_schema", 1, schema)
    assert codec.encode_raw(raw(fits)) == framed(1) + raw(fits)
    assert codec.encode(fits) == framed(1) + raw(fits)
    with pytest.raises(Misfit) as caught:
        codec.encode(misfit)
    assert str(caught.value) == why
    with pytest.raises(Misfit) as from_raw:
        codec.encode_raw(raw(misfit))
    assert str(from_raw.value) == why


@pytest.mark.parametrize("schema", [True, {}, {"title": "anything"}])
def test_a_schema_that_says_nothing_accepts_anything(schema: Any) -> None:
    assert json_type(schema) is Any


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (5, "schema 5"),
        ({"enum": [1, 2]}, "keywords ['enum']"),
        ({"type": "object", "properties": {"a": {"type": "date"}}}, "type 'date'"),
        (
            {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}},
            "additionalProperties beside properties",
        ),
        ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "a required property without a schema"),
    ],
)
def test_what_msgspec_types_cannot_say_is_unsupported_naming_it(schema: Any, why: str) -> None:
    with pytest.raises(Unsupported) as caught:
        json_type(schema)
    assert str(caught.value) == why


# --- framing, formats and refusals -------------------------------------------------------------------------------


def test_a_type_with_no_type_is_unsupported() -> None:
    with pytest.raises(Unsupported) as caught:
        avro_type({"name": "untyped"}, {})
    assert str(caught.value) == "Avro type None cannot be written from JSON"


def test_a_closed_object_of_no_properties_accepts_only_the_empty_object() -> None:
    codec = ValueCodec("json_schema", 1, {"type": "object", "additionalProperties": False})
    assert codec.encode({}) == framed(1) + b"{}"
    with pytest.raises(Misfit) as caught:
        codec.encode({"a": 1})
    assert str(caught.value) == "field 'a' is not in the schema"


def test_the_frame_is_magic_zero_and_a_big_endian_four_byte_id() -> None:
    assert framed(1) == b"\x00\x00\x00\x00\x01"
    assert framed(0x01020304) == b"\x00\x01\x02\x03\x04"
    assert unframed(framed(2**32 - 1) + b"payload") == (2**32 - 1, b"payload")
    assert unframed(framed(258)) == (258, b"")


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01{}", b"{}{}{}"])
def test_a_value_that_is_not_framed_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError) as caught:
        unframed(value)
    assert str(caught.value) == "not a value framed with a schema id (magic byte 0 and 4 bytes of id)"


def test_json_has_no_framing() -> None:
    with pytest.raises(ValueError) as caught:
        ValueCodec("json", 1, {})  # type: ignore[arg-type]
    assert str(caught.value) == "no framing for value_format 'json'"


@pytest.mark.parametrize(
    ("value_format", "schema", "why"),
    [
        (
            "avro",
            {"type": "enum", "name": "e", "symbols": ["a"]},
            'an Avro value_schema must be a record schema ({"type": "record", ...})',
        ),
        (
            "avro",
            {"type": "record", "name": "r", "fields": [{"name": "b", "type": "bytes"}]},
            "the Avro value_schema cannot be used: Unsupported: Avro type 'bytes' cannot be written from JSON",
        ),
        (
            "avro",
            {"type": "record", "name": "r", "fields": [{"name": "b", "type": "nope"}]},
            "the Avro value_schema cannot be used: UnknownType: nope",
        ),
        (
            "avro",
            {"type": "record", "name": "r", "fields": [{"name": "u", "type": [POINT, {**POINT, "name": "p2"}]}]},
            "the Avro value_schema cannot be used: TypeError: If a type union contains multiple Struct types",
        ),
        ("json_schema", {"type": "objekt"}, "the JSON value_schema is not a valid JSON Schema: 'objekt' is not valid"),
    ],
)
def test_a_schema_that_cannot_write_json_records_is_refused_saying_why(
    value_format: str, schema: Any, why: str
) -> None:
    with pytest.raises(ValueError) as caught:
        check_value_schema(value_format, schema)  # type: ignore[arg-type]
    assert str(caught.value).startswith(why), str(caught.value)


def test_a_valid_schema_of_each_format_passes_the_check() -> None:
    check_value_schema("avro", ALL_TYPES)
    check_value_schema("json_schema", json_schema(RECORDS, closed=True))
