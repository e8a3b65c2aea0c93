"""How a kept record's value is written for a Schema Registry: framed (magic byte 0, the schema's id in 4 bytes,
big-endian) then the record as JSON text (``json_schema``) or Avro binary (``avro``), checked against the schema first.

A record fits a schema when the schema accepts it whole: every required field present, every value of an allowed
type, and no field the schema does not name (an Avro record has nowhere to put one, and the schemas crawler_ops
infers are closed). A record that does not fit raises :class:`Misfit` naming where, and is never written.

Checking is done by msgspec in C: the schema is compiled once into msgspec types (a struct per object, with the
record's own field names) and each record is decoded against them. A JSON Schema using what these types cannot say
(patterns, enums, bounds, ``$ref``...) is checked by the ``jsonschema`` package instead, about ten times slower.
"""

from __future__ import annotations

import functools
import itertools
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

import msgspec

from crawler_ops.message.schemas import avro_name

ValueFormat = Literal["json", "json_schema", "avro"]
MAGIC = b"\x00"
_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
_AVRO_TYPES = {"null": type(None), "boolean": bool, "int": int, "long": int, "float": float, "double": float}
_AVRO_TYPES["string"] = str
_IGNORED = {"$schema", "$id", "title", "description", "default", "examples", "$comment"}
_names = itertools.count()


class Misfit(ValueError):
    """A record the schema does not accept; the message says where (``$.a.b[2]``) and what."""


class Unsupported(ValueError):
    """A schema construct msgspec's types cannot express."""


def framed(schema_id: int) -> bytes:
    """The 5 bytes a value framed with ``schema_id`` starts with."""
    return MAGIC + schema_id.to_bytes(4, "big")


def unframed(value: bytes) -> tuple[int, bytes]:
    """The schema id and the payload of a framed value; ValueError for a value that is not framed."""
    if len(value) < 5 or value[:1] != MAGIC:
        raise ValueError("not a value framed with a schema id (magic byte 0 and 4 bytes of id)")
    return int.from_bytes(value[1:5], "big"), value[5:]


def misfit_text(exc: msgspec.ValidationError) -> str:
    """msgspec's validation message in the words a data engineer reads: ``field 'x' ...`` with the path."""
    text = str(exc)
    found = re.fullmatch(r"Object contains unknown field `(.*?)`(?: - at `(.*)`)?", text)
    if found:
        where = f" in {found.group(2)}" if found.group(2) else ""
        return f"field '{found.group(1)}'{where} is not in the schema"
    found = re.fullmatch(r"Object missing required field `(.*?)`(?: - at `(.*)`)?", text)
    if found:
        where = f" in {found.group(2)}" if found.group(2) else ""
        return f"required field '{found.group(1)}'{where} is missing"
    return text


class ValueCodec:
    """Checks and writes the values of one schema id.

    :param value_format: ``json_schema`` (the value is the record's JSON text) or ``avro``.
    :param schema_id: the id the registry gave the schema.
    :param schema: the schema itself (a JSON Schema, or an Avro record schema).
    """

    def __init__(self, value_format: ValueFormat, schema_id: int, schema: Mapping[str, Any]) -> None:
        if value_format not in ("json_schema", "avro"):
            raise ValueError(f"no framing for value_format {value_format!r}")
        self.format = value_format
        self.schema_id = schema_id
        self.schema = dict(schema)
        self.prefix = framed(schema_id)
        self._json_validator: Any = None
        if value_format == "avro":
            import fastavro  # only tasks writing Avro need it

            fastavro.parse_schema(self.schema)  # the reference parser: names, defaults, references
            self._type, self._write_avro = avro_type(self.schema, {})
        else:
            try:
                self._type = json_type(self.schema)
                msgspec.json.Decoder(self._type)
            except (Unsupported, TypeError):
                import jsonschema  # a schema msgspec's types cannot say: the reference validator

                self._type = None
                cls = jsonschema.validators.validator_for(self.schema)
                self._json_validator = cls(self.schema)
        if self._type is not None:
            self._decode = msgspec.json.Decoder(self._type).decode

    def encode_raw(self, record: bytes | msgspec.Raw) -> bytes:
        """The framed value of a record's JSON text as the source sent it (JSON text, UTF-8)."""
        if self.format == "json_schema":
            if self._type is not None:
                try:
                    self._decode(record)
                except msgspec.ValidationError as exc:
                    raise Misfit(misfit_text(exc)) from None
                return self.prefix + bytes(record)
            return self.encode(msgspec.json.decode(record))
        try:
            value = self._decode(record)
        except msgspec.ValidationError as exc:
            raise Misfit(misfit_text(exc)) from None
        return self._avro_bytes(value)

    def encode(self, record: Any) -> bytes:
        """The framed value of a decoded record (a transform's result)."""
        if self._type is not None:
            try:
                value = msgspec.convert(record, self._type)
            except msgspec.ValidationError as exc:
                raise Misfit(misfit_text(exc)) from None
        else:
            error = next(iter(self._json_validator.iter_errors(record)), None)
            if error is not None:
                where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
                raise Misfit(f"{error.message} - at `{where}`")
        if self.format == "json_schema":
            return self.prefix + msgspec.json.encode(record)
        return self._avro_bytes(value)

    def _avro_bytes(self, value: Any) -> bytes:
        out = bytearray(self.prefix)
        try:
            self._write_avro(out, value)
        except (
            ValueError,
            TypeError,
            OverflowError,
            struct.error,
        ) as exc:  # a long beyond 64 bits, a float beyond float32...
            raise Misfit(f"cannot be written as Avro: {exc}") from None
        return bytes(out)


def _struct(fields: list[tuple[str, Any, bool, Any]], open_object: bool = False) -> type[msgspec.Struct]:
    """A struct whose fields are ``(name in the record, type, required, default)``."""
    attrs = [
        (f"f{i}", kind) if required else (f"f{i}", kind, default)
        for i, (_, kind, required, default) in enumerate(fields)
    ]
    rename = {f"f{i}": name for i, (name, *_) in enumerate(fields)}
    return msgspec.defstruct(
        f"Fits{next(_names)}", attrs, rename=rename, forbid_unknown_fields=not open_object, kw_only=True, gc=False
    )


def json_type(schema: Any) -> Any:
    """The msgspec type of a JSON Schema (the subset crawler_ops infers, and the common constructs around it)."""
    if schema is True:
        return Any
    if not isinstance(schema, Mapping):
        raise Unsupported(f"schema {schema!r}")
    keys = set(schema) - _IGNORED
    if not keys:
        return Any
    if keys == {"anyOf"}:
        return _union([json_type(branch) for branch in schema["anyOf"]])
    if "type" not in keys or keys - {"type", "properties", "required", "additionalProperties", "items"}:
        raise Unsupported(f"keywords {sorted(keys)}")
    named = schema["type"]
    parts = []
    for name in [named] if isinstance(named, str) else named:
        if name == "object":
            parts.append(_json_object(schema))
        elif name == "array":
            parts.append(list[json_type(schema.get("items", {}))])  # type: ignore[misc]
        elif name in _JSON_TYPES:
            parts.append(_JSON_TYPES[name])
        else:
            raise Unsupported(f"type {name!r}")
    return _union(parts)


def _json_object(schema: Mapping[str, Any]) -> Any:
    properties = schema.get("properties", {})
    more = schema.get("additionalProperties", True)
    if not properties and more not in (True, False):
        return dict[str, json_type(more)]  # type: ignore[misc]
    if more not in (True, False):
        raise Unsupported("additionalProperties beside properties")
    required = set(schema.get("required", ()))
    if required - set(properties):
        raise Unsupported("a required property without a schema")
    fields = [(name, json_type(inner), name in required, None) for name, inner in properties.items()]
    return _struct(fields, open_object=more is not False)


def _union(parts: list[Any]) -> Any:
    if Any in parts:
        return Any
    return parts[0] if len(parts) == 1 else Union[tuple(parts)]  # noqa: UP007 - built from a list


Writer = Callable[[bytearray, Any], None]
_INT32, _INT64 = 2**31, 2**63
# The zig-zag varint of every int below this, made once: lengths of strings and arrays, most values.
_SMALL = 1 << 14


def _long_bytes(value: int) -> bytes:
    """Avro's long: zig-zag, then a base-128 varint, low group first."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_VARINTS = [_long_bytes(n) for n in range(_SMALL)]


def _write_long(out: bytearray, value: int) -> None:
    if 0 <= value < _SMALL:
        out += _VARINTS[value]
    elif -_INT64 <= value < _INT64:
        out += _long_bytes(value)
    else:
        raise OverflowError(f"{value} does not fit Avro's 64-bit long")


def _write_int(out: bytearray, value: int) -> None:
    if not -_INT32 <= value < _INT32:
        raise OverflowError(f"{value} does not fit Avro's 32-bit int")
    _write_long(out, value)


def _write_string(out: bytearray, value: str) -> None:
    data = value.encode()
    size = len(data)
    out += _VARINTS[size] if size < _SMALL else _long_bytes(size)
    out += data


def _write_null(out: bytearray, value: None) -> None:
    pass


def _write_boolean(out: bytearray, value: bool) -> None:
    out.append(1 if value else 0)


def _write_float(out: bytearray, value: float) -> None:
    out += struct.pack("<f", value)


def _write_double(out: bytearray, value: float) -> None:
    out += struct.pack("<d", value)


_AVRO_WRITERS: dict[str, Writer] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": _write_long,
    "float": _write_float,
    "double": _write_double,
    "string": _write_string,
}


def avro_type(schema: Any, named: dict[str, tuple[Any, Writer]], namespace: str = "") -> tuple[Any, Writer]:
    """The msgspec type of an Avro type, and the function appending a value of that type (as msgspec decodes it: a
    record is a struct) to a buffer in Avro's binary encoding. ``named``: record types seen so far, by full and short
    name; ``namespace``: the enclosing one, which a nested record without its own inherits."""
    if isinstance(schema, list):
        return _avro_union([avro_type(branch, named, namespace) for branch in schema])
    if isinstance(schema, str):
        if schema in _AVRO_TYPES:
            return _AVRO_TYPES[schema], _AVRO_WRITERS[schema]
        if schema in named:
            return named[schema]
        raise Unsupported(f"Avro type {schema!r} cannot be written from JSON")
    kind = schema.get("type")
    if kind == "record":
        return _avro_record(schema, named, namespace)
    if kind in ("array", "map"):
        inner, write = avro_type(schema["items" if kind == "array" else "values"], named, namespace)
        if kind == "array":
            return list[inner], functools.partial(_write_array, write)  # type: ignore[valid-type]
        return dict[str, inner], functools.partial(_write_map, write)  # type: ignore[valid-type]
    if kind == "enum":
        symbols = {symbol: _VARINTS[index] for index, symbol in enumerate(schema["symbols"])}
        return Literal[tuple(schema["symbols"])], lambda out, value: out.extend(symbols[value])
    if isinstance(kind, (str, list)):
        return avro_type(kind, named, namespace)  # {"type": "long", "logicalType": ...}: the underlying type
    raise Unsupported(f"Avro type {kind!r} cannot be written from JSON")


def _write_array(write: Writer, out: bytearray, value: list[Any]) -> None:
    """One block of all the items, then the empty block that ends an array."""
    if value:
        _write_long(out, len(value))
        for item in value:
            write(out, item)
    out.append(0)


def _write_map(write: Writer, out: bytearray, value: dict[str, Any]) -> None:
    if value:
        _write_long(out, len(value))
        for key, item in value.items():
            _write_string(out, key)
            write(out, item)
    out.append(0)


def _avro_union(branches: list[tuple[Any, Writer]]) -> tuple[Any, Writer]:
    """A union's value is the index of its branch, then the value: the branch is the first one whose type is the
    value's as msgspec decoded it (msgspec gives a JSON integer to a float branch as a float)."""
    by_type: dict[type, tuple[bytes, Writer]] = {}
    for index, (kind, write) in enumerate(branches):
        for python_type in _python_types(kind):
            by_type.setdefault(python_type, (_VARINTS[index], write))
    kinds = _union([kind for kind, _ in branches])
    if len(branches) == 2 and type(None) in by_type and len(by_type) == 2:
        return kinds, _nullable(by_type)

    def write_union(out: bytearray, value: Any) -> None:
        found = by_type.get(msgspec.Struct if isinstance(value, msgspec.Struct) else type(value))
        if found is None:
            raise ValueError(f"no branch of the union takes a {type(value).__name__}")
        out += found[0]
        found[1](out, value)

    return kinds, write_union


def _nullable(by_type: dict[type, tuple[bytes, Writer]]) -> Writer:
    """A union of null and one other type, as most fields of an inferred schema are: msgspec has already checked
    that the value is None or of the other type, so only None is told apart (a string written inline)."""
    null_tag = by_type[type(None)][0]
    tag, write = next(found for python_type, found in by_type.items() if python_type is not type(None))
    if write is _write_string:

        def write_nullable_string(out: bytearray, value: str | None) -> None:
            if value is None:
                out += null_tag
                return
            data = value.encode()
            size = len(data)
            out += tag
            out += _VARINTS[size] if size < _SMALL else _long_bytes(size)
            out += data

        return write_nullable_string

    def write_nullable(out: bytearray, value: Any) -> None:
        if value is None:
            out += null_tag
        else:
            out += tag
            write(out, value)

    return write_nullable


def _python_types(kind: Any) -> tuple[type, ...]:
    """What msgspec decodes a value of ``kind`` as."""
    if kind is type(None):
        return (type(None),)
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return (msgspec.Struct,)
    origin = getattr(kind, "__origin__", kind)
    if origin is Literal:
        return (str,)
    return (origin,)


def _avro_record(schema: Mapping[str, Any], named: dict[str, tuple[Any, Writer]], enclosing: str) -> tuple[Any, Writer]:
    name = str(schema["name"])
    namespace = name.rpartition(".")[0] or str(schema.get("namespace") or enclosing)
    fields = []
    writers = []
    for field in schema["fields"]:
        inner, write = avro_type(field["type"], named, namespace)
        fields.append((json_name(field), inner, "default" not in field, field.get("default")))
        writers.append(write)
    struct_type = _struct(fields)
    astuple = msgspec.structs.astuple

    def write_record(out: bytearray, value: msgspec.Struct) -> None:
        for write, item in zip(writers, astuple(value), strict=True):
            write(out, item)

    result = (struct_type, write_record)
    short = name.rpartition(".")[2]
    named[short] = result
    if namespace:
        named[f"{namespace}.{short}"] = result
    return result


def json_name(field: Mapping[str, Any]) -> str:
    """The record's own name for an Avro field: its ``doc`` when the Avro name was made from it (a name Avro cannot
    carry, such as ``时间`` written ``_u65f6_u95f4``), else the Avro name."""
    name, doc = field["name"], field.get("doc")
    if isinstance(doc, str) and doc and doc != name:
        base = avro_name(doc)
        if name == base or re.fullmatch(re.escape(base) + r"_\d+", name):
            return doc
    return str(name)


def check_value_schema(value_format: ValueFormat, schema: Mapping[str, Any]) -> None:
    """A ValueError saying why ``schema`` cannot check and write ``value_format`` values (an Avro schema must be a
    record whose types JSON can fill; a JSON Schema must be valid)."""
    if value_format == "avro":
        if schema.get("type") != "record":
            raise ValueError('an Avro value_schema must be a record schema ({"type": "record", ...})')
        import fastavro

        try:
            fastavro.parse_schema(dict(schema))
            msgspec.json.Decoder(avro_type(schema, {})[0])
        except (fastavro.schema.SchemaParseException, Unsupported, TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"the Avro value_schema cannot be used: {type(exc).__name__}: {exc}") from None
        return
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"the JSON value_schema is not a valid JSON Schema: {exc.message}") from None
