"""Pure schema inference: a JSON Schema (draft-07) and an Avro record schema from sample records.

Types read from the samples: text is ``string``, integers ``long``, other numbers ``double``, ``true``/``false``
``boolean``, ``None`` ``null``; a dict is a nested object (a nested Avro record), a list an array of the union of
its items. A field seen with more than one type is a union; a field absent from some samples, or ``None`` in
some, is optional: left out of ``required`` in the JSON Schema, ``["null", ...]`` with default null in Avro.

Avro names must match ``[A-Za-z_][A-Za-z0-9_]*``. A field name that already does (``Collect_time``) is kept
as it is. Otherwise every character outside ``[A-Za-z0-9_]`` becomes ``_u`` and its code point in 4 hex digits
(more for code points above FFFF), and a leading digit gets a ``_`` in front: ``时间`` is ``_u65f6_u95f4``,
``page-size`` is ``page_u002dsize``, ``1st`` is ``_1st``. The rule is one to one for names without ``_u``
in them; a clash (a record holding both ``a-b`` and ``a_u002db``) gets ``_2``, ``_3`` ... after the later
name. The original name is the Avro field's ``doc`` and the mapping, Avro name to original name, is returned
by ``avro_names``, so a producer renames keys with it before encoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_AVRO_CHAR = re.compile(r"[A-Za-z0-9_]")
# Order of the branches of a union: null first, so default null is valid Avro.
_ORDER = ("null", "boolean", "long", "double", "string", "array", "object")


def kind(value: object) -> str:
    """The inferred type name of one value: null, boolean, long, double, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    raise TypeError(f"no schema type for a value of type {type(value).__name__}")


def avro_name(name: str) -> str:
    """The Avro name of a field name, by the rule of this module (without the clash suffix)."""
    if _AVRO_NAME.fullmatch(name):
        return name
    text = "".join(c if _AVRO_CHAR.fullmatch(c) else f"_u{ord(c):04x}" for c in name)
    return text if text and not text[0].isdigit() else f"_{text}"


def avro_names(names: Iterable[str]) -> dict[str, str]:
    """Avro name -> original name for the field names of one record, clashes numbered ``_2``, ``_3`` ..."""
    mapping: dict[str, str] = {}
    for name in names:
        base = candidate = avro_name(name)
        number = 1
        while candidate in mapping:
            number += 1
            candidate = f"{base}_{number}"
        mapping[candidate] = name
    return mapping


class _Shape:
    """What the samples show at one position: the kinds seen, the fields of objects, the items of arrays."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()
        self.fields: dict[str, _Shape] = {}
        self.seen: dict[str, int] = {}
        self.objects = 0
        self.items: _Shape | None = None

    def add(self, value: object) -> None:
        k = kind(value)
        self.kinds.add(k)
        if k == "object":
            self.objects += 1
            for name, inner in value.items():  # type: ignore[attr-defined]
                self.fields.setdefault(str(name), _Shape()).add(inner)
                self.seen[str(name)] = self.seen.get(str(name), 0) + 1
        elif k == "array":
            self.items = self.items or _Shape()
            for inner in value:  # type: ignore[attr-defined]
                self.items.add(inner)

    def optional(self, name: str) -> bool:
        return self.seen[name] < self.objects or "null" in self.fields[name].kinds

    def json(self, closed: bool, loose: bool = False, nullable: bool = False) -> dict[str, Any]:
        branches = []
        for k in sorted(self.kinds | ({"null"} if nullable else set()), key=_ORDER.index):
            if k == "object":
                required = [] if loose else sorted(n for n in self.fields if self.seen[n] == self.objects)
                branch: dict[str, Any] = {
                    "type": "object",
                    "properties": {n: inner.json(closed, loose, loose) for n, inner in self.fields.items()},
                }
                if required:
                    branch["required"] = required
                if closed:
                    branch["additionalProperties"] = False
            elif k == "array":
                items = self.items.json(closed, loose) if self.items and self.items.kinds else {}
                branch = {"type": "array", "items": items}
            else:
                branch = {"type": {"long": "integer", "double": "number"}.get(k, k)}
            branches.append(branch)
        if not branches:
            return {}
        if len(branches) == 1:
            return branches[0]
        if all(set(b) == {"type"} for b in branches):
            types = [b["type"] for b in branches]
            # An integer is a number too: integer+number is just number.
            if "number" in types and "integer" in types:
                types.remove("integer")
            return {"type": types if len(types) > 1 else types[0]}
        return {"anyOf": branches}

    def avro_record(self, name: str, taken: set[str], loose: bool = False) -> dict[str, Any]:
        taken.add(name)
        fields = []
        for field_name, original in avro_names(self.fields).items():
            inner = self.fields[original]
            kinds = set(inner.kinds)
            if loose or self.optional(original):
                kinds.add("null")
            avro_type = inner.avro_type(kinds, f"{name}_{field_name}", taken, loose)
            field: dict[str, Any] = {"name": field_name, "type": avro_type}
            if "null" in kinds:
                field["default"] = None
            if field_name != original:
                field["doc"] = original
            fields.append(field)
        return {"type": "record", "name": name, "fields": fields}

    def avro_type(self, kinds: set[str], name: str, taken: set[str], loose: bool = False) -> Any:
        branches: list[Any] = []
        for k in sorted(kinds, key=_ORDER.index):
            if k == "object":
                record_name = name
                while record_name in taken:
                    record_name += "_"
                branches.append(self.avro_record(record_name, taken, loose))
            elif k == "array":
                items = self.items
                item_type = (
                    items.avro_type(set(items.kinds), f"{name}_item", taken, loose) if items and items.kinds else "null"
                )
                branches.append({"type": "array", "items": item_type})
            else:
                branches.append(k)
        if not branches:
            return "null"
        return branches[0] if len(branches) == 1 else branches


def _shape(records: Iterable[Mapping[str, Any]]) -> _Shape:
    shape = _Shape()
    for record in records:
        if not isinstance(record, Mapping):
            raise TypeError("a sample record must be a dict")
        shape.add(record)
    if not shape.objects:
        raise ValueError("no sample records to infer a schema from")
    return shape


def json_schema(
    records: Iterable[Mapping[str, Any]], title: str = "record", closed: bool = False, loose: bool = False
) -> dict[str, Any]:
    """A draft-07 JSON Schema that every one of ``records`` is valid against.

    :param closed: objects allow only the properties seen (``additionalProperties: false``). A registry then accepts
        a later version that adds an optional property (no old record can hold it), where an open object's new
        property breaks BACKWARD compatibility (an old record could hold it with any value).
    :param loose: every property optional and nullable, as a source may leave out or null any field the samples
        happened to hold (what a schema registered from one page needs).
    """
    schema = _shape(records).json(closed, loose)
    return {"$schema": JSON_SCHEMA_DRAFT, "title": title, **schema}


def avro_schema(
    records: Iterable[Mapping[str, Any]], name: str = "Record", namespace: str = "crawler_ops", loose: bool = False
) -> dict[str, Any]:
    """An Avro record schema for ``records``; nested objects are nested records named after their path. ``loose``:
    every field nullable with default null (see :func:`json_schema`)."""
    schema = _shape(records).avro_record(avro_name(name), set(), loose)
    schema["namespace"] = namespace
    return schema


def incompatible_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why ``new`` (an Avro record schema) cannot read data written with ``old``: one sentence a field.

    BACKWARD: a consumer on the new schema reads old records. It breaks when the new schema adds a field
    without a default, or changes a field's type to one old values cannot be promoted to.
    """
    problems: list[str] = []
    _compare(old, new, "", problems)
    return problems


_PROMOTIONS = {("long", "double"), ("long", "float"), ("int", "long"), ("int", "double"), ("float", "double")}


def _branches(avro_type: Any) -> list[Any]:
    return list(avro_type) if isinstance(avro_type, list) else [avro_type]


def _type_name(avro_type: Any) -> str:
    return avro_type["type"] if isinstance(avro_type, dict) else str(avro_type)


def _compare(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str, problems: list[str]) -> None:
    old_fields = {f["name"]: f for f in old.get("fields", [])}
    for field in new.get("fields", []):
        path = prefix + field["name"]
        before = old_fields.get(field["name"])
        if before is None:
            if "default" not in field:
                problems.append(f"{path} is new and has no default, so records written before it cannot be read")
            continue
        for branch in _branches(before["type"]):
            match = _reader_branch(branch, _branches(field["type"]))
            if match is None:
                problems.append(
                    f"{path} was {_type_name(branch)} and is now {_describe(field['type'])}, "
                    f"which cannot hold an old {_type_name(branch)} value"
                )
            elif _type_name(branch) == "record":
                _compare(branch, match, path + ".", problems)


def _reader_branch(writer: Any, readers: list[Any]) -> Any:
    name = _type_name(writer)
    for reader in readers:
        reader_name = _type_name(reader)
        if reader_name == name or (name, reader_name) in _PROMOTIONS:
            if name == "array" and not _reads_all(writer["items"], reader["items"]):
                continue
            return reader
    return None


def _reads_all(writer: Any, reader: Any) -> bool:
    """Whether every branch ``writer`` may write is read by a branch of ``reader`` (array items)."""
    return all(_reader_branch(branch, _branches(reader)) is not None for branch in _branches(writer))


def _describe(avro_type: Any) -> str:
    return " or ".join(_type_name(b) for b in _branches(avro_type))


def json_schema_breaks(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why ``new`` (a JSON Schema) rejects records that ``old`` accepts: one sentence a break.

    BACKWARD, as a registry checks it: every record valid under the old schema must stay valid. A break is a
    property newly required; one whose old types the new schema does not accept (an integer is a number, not the
    other way round); a property the new schema lists that an open old object did not (an open object, as
    :func:`json_schema` infers them, lets a record hold any value under a name it does not list); and a property the
    old schema listed that a closed new object (``additionalProperties: false``) drops. Nested objects and array
    items are compared the same way.
    """
    problems: list[str] = []
    _compare_json(old, new, "", problems)
    return problems


def _json_types(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Type name -> the (sub)schema giving it; ``any`` for a schema that names no type."""
    if "anyOf" in schema:
        found: dict[str, Mapping[str, Any]] = {}
        for branch in schema["anyOf"]:
            found.update(_json_types(branch))
        return found
    named = schema.get("type")
    if named is None:
        return {"any": schema}
    return {name: schema for name in ([named] if isinstance(named, str) else named)}


def _accepting(types: Mapping[str, Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    for candidate in (name, "number", "any") if name == "integer" else (name, "any"):
        if candidate in types:
            return types[candidate]
    return None


def _compare_json(old: Mapping[str, Any], new: Mapping[str, Any], path: str, problems: list[str]) -> None:
    new_types = _json_types(new)
    if "any" in new_types:
        return
    where = path or "the record"
    for name, before in _json_types(old).items():
        after = _accepting(new_types, name) if name != "any" else None
        if after is None:
            problems.append(
                f"{where} was {name} and is now {' or '.join(new_types)}, which rejects an old {name} value"
            )
        elif name == "object":
            _compare_properties(before, after, path, problems)
        elif name == "array":
            _compare_json(before.get("items", {}), after.get("items", {}), f"{path}[]" if path else "[]", problems)


def _compare_properties(old: Mapping[str, Any], new: Mapping[str, Any], path: str, problems: list[str]) -> None:
    prefix = f"{path}." if path else ""
    old_properties, new_properties = old.get("properties", {}), new.get("properties", {})
    was_required = set(old.get("required", ()))
    for name in new.get("required", ()):
        if name not in was_required:
            why = "is new and required" if name not in old_properties else "is now required"
            problems.append(f"{prefix}{name} {why}, so records written before without it are rejected")
    old_open = old.get("additionalProperties", True) is not False
    for name, after in new_properties.items():
        if name in old_properties:
            _compare_json(old_properties[name], after, prefix + name, problems)
        elif old_open and name not in new.get("required", ()) and after != {}:
            problems.append(
                f"{prefix}{name} is new, and the old schema let a record hold {name} with any value, which this one "
                "may reject"
            )
    if new.get("additionalProperties", True) is False:
        for name in old_properties:
            if name not in new_properties:
                problems.append(
                    f"{prefix}{name} is gone and no other property is allowed, so old records holding it are rejected"
                )


def widen_json_schema(schema: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A JSON Schema accepting every record ``schema`` accepts and ``records`` too: the records' inferred schema
    merged in (properties united, a property required only where both require it, types united; an object stays
    closed where ``schema`` closed it). Under a registry's BACKWARD level it is a compatible next version."""
    closed = _closed(schema)
    merged = _merge_json(_bare(schema), _shape(records).json(closed, loose=True))
    return {key: value for key, value in schema.items() if key in ("$schema", "title")} | merged


def _bare(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in schema.items() if key not in ("$schema", "title", "$id", "description")}


def _closed(schema: Mapping[str, Any]) -> bool:
    return any(branch.get("additionalProperties") is False for branch in _json_types(schema).values())


def _merge_json(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    if a == b:
        return dict(a)
    if not a or not b:
        return {}
    merged: dict[str, Mapping[str, Any]] = {name: _branch(name, sub) for name, sub in _json_types(a).items()}
    for name, sub in _json_types(b).items():
        if name == "any":
            return {}
        if name not in merged:
            merged[name] = _branch(name, sub)
        elif name == "object":
            merged[name] = _merge_objects(merged[name], sub)
        elif name == "array":
            merged[name] = {"type": "array", "items": _merge_json(merged[name].get("items", {}), sub.get("items", {}))}
    if "number" in merged:
        merged.pop("integer", None)
    if "any" in merged:
        return {}
    branches = [merged[name] for name in sorted(merged, key=_json_order)]
    if len(branches) == 1:
        return dict(branches[0])
    if all(set(b) == {"type"} for b in branches):
        return {"type": [b["type"] for b in branches]}
    return {"anyOf": branches}


def _json_order(name: str) -> int:
    names = ("null", "boolean", "integer", "number", "string", "array", "object")
    return names.index(name) if name in names else len(names)


def _branch(name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``schema`` that gives type ``name``, as a schema of that type alone."""
    if name == "object":
        return {"type": "object", **{k: v for k, v in schema.items() if k in ("properties", "required")}} | (
            {"additionalProperties": False} if schema.get("additionalProperties") is False else {}
        )
    if name == "array":
        return {"type": "array", "items": schema.get("items", {})}
    return {"type": name}


def _merge_objects(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    properties = dict(a.get("properties", {}))
    for name, inner in b.get("properties", {}).items():
        properties[name] = _merge_json(properties[name], inner) if name in properties else inner
    required = sorted(set(a.get("required", ())) & set(b.get("required", ())))
    merged: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        merged["required"] = required
    if a.get("additionalProperties") is False:
        merged["additionalProperties"] = False
    return merged


def widen_avro_schema(schema: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """An Avro record schema that can write every record ``schema`` can and ``records`` too: fields united (a field
    one side lacks becomes nullable with default null), a field's types united, nested records merged by position.
    Under a registry's BACKWARD level it is a compatible next version."""
    new = avro_schema(records, str(schema["name"]), str(schema.get("namespace") or "crawler_ops"), loose=True)
    merged = _merge_avro_record(schema, new)
    if "namespace" in schema:
        merged["namespace"] = schema["namespace"]
    return merged


def _merge_avro_record(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    theirs = {field["name"]: field for field in b.get("fields", [])}
    fields = []
    for field in a.get("fields", []):
        other = theirs.pop(field["name"], None)
        merged = dict(field)
        if other is not None:
            merged["type"] = _merge_avro_type(field["type"], other["type"])
        if (other is None or "default" in other) and "default" not in field:
            merged["type"] = _nullable(merged["type"])
            merged["default"] = None
        fields.append(merged)
    for field in theirs.values():
        fields.append({**field, "type": _nullable(field["type"]), "default": None})
    return {key: value for key, value in a.items() if key != "fields"} | {"fields": fields}


def _nullable(avro_type: Any) -> Any:
    branches = _branches(avro_type)
    if branches[0] == "null":
        return avro_type
    return ["null", *(branch for branch in branches if branch != "null")]


def _merge_avro_type(a: Any, b: Any) -> Any:
    branches = _branches(a)
    for theirs in _branches(b):
        name = _type_name(theirs)
        at = next((i for i, ours in enumerate(branches) if _type_name(ours) == name), None)
        if at is None:
            branches.append(theirs)
        elif name == "record":
            branches[at] = _merge_avro_record(branches[at], theirs)
        elif name == "array":
            branches[at] = {**branches[at], "items": _merge_avro_type(branches[at]["items"], theirs["items"])}
    return branches[0] if len(branches) == 1 else branches
