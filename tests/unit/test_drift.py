"""Unit tests of crawler_ops.drift: a record's fields typed from its raw JSON, profiles that add up, and the drift of a
run against its task's baseline (new, missing, retyped fields)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler_ops import drift as drift_module
from crawler_ops.drift import (
    INVALID,
    JSON_TYPES,
    MAX_FIELDS,
    MAX_LISTED,
    MAX_NAME_CHARS,
    OTHER,
    ROOT,
    FieldProfile,
    json_type,
    profile_values,
)

encode = msgspec.json.encode


def raw(value: Any) -> msgspec.Raw:
    """A published value as the crawl holds it: a slice of the page's text."""
    page = b'{"data":[' + encode(value) + b"]}"
    return msgspec.json.decode(page, type=dict[str, list[msgspec.Raw]])["data"][0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("x", "string"),
        ("", "string"),
        (0, "integer"),
        (-12, "integer"),
        (1.5, "number"),
        (-0.25, "number"),
        (1e300, "number"),
        (True, "boolean"),
        (False, "boolean"),
        (None, "null"),
        ({"a": 1}, "object"),
        ([1, 2], "array"),
    ],
    ids=lambda v: repr(v),
)
def test_a_value_is_typed_by_its_text(value: Any, expected: str) -> None:
    assert json_type(encode(value)) == expected


def test_exponent_without_a_dot_is_a_number() -> None:
    assert json_type(b"1E5") == json_type(b"2e-3") == "number"


def test_a_page_of_raw_records_is_profiled_per_field_and_type() -> None:
    records = [raw({"id": "a", "n": 1, "tags": []}), raw({"id": "b", "n": None}), raw({"id": "c", "n": 2.5})]

    profile = profile_values(records)

    assert profile.sampled_records == 3
    assert profile.fields == {
        "id": {"string": 3},
        "n": {"integer": 1, "null": 1, "number": 1},
        "tags": {"array": 1},
    }


def test_only_the_first_sample_records_of_a_page_are_profiled() -> None:
    records = [encode({"i": i}) for i in range(10)] + [encode({"late": True})]

    profile = profile_values(records, sample=4)

    assert profile.sampled_records == 4
    assert profile.fields == {"i": {"integer": 4}}
    assert profile_values(records, sample=None).fields["late"] == {"boolean": 1}


def test_a_value_that_is_not_an_object_is_profiled_as_the_root() -> None:
    profile = profile_values([encode([1, 2]), encode("x"), b'{"a":'])

    assert profile.fields == {ROOT: {"array": 1, "string": 1, INVALID: 1}}


json_types = st.sampled_from(JSON_TYPES)
field_names = st.sampled_from(["a", "b", "c", "d"])
profiles = st.builds(
    lambda fields, extra: FieldProfile(
        max((sum(t.values()) for t in fields.values()), default=0) + extra,
        fields,
    ),
    st.dictionaries(field_names, st.dictionaries(json_types, st.integers(1, 50), min_size=1), max_size=4),
    st.integers(0, 5),
)


@given(profiles, profiles, profiles)
def test_adding_profiles_is_associative_and_commutative(a: FieldProfile, b: FieldProfile, c: FieldProfile) -> None:
    assert ((a + b) + c) == (a + (b + c))
    assert (a + b) == (b + a)
    assert (a + FieldProfile()) == a


@given(profiles, profiles)
def test_added_profiles_count_every_record_and_every_field_type_once(a: FieldProfile, b: FieldProfile) -> None:
    total = a + b

    assert total.sampled_records == a.sampled_records + b.sampled_records
    for name in {*a.fields, *b.fields}:
        for kind in JSON_TYPES:
            expected = a.fields.get(name, {}).get(kind, 0) + b.fields.get(name, {}).get(kind, 0)
            assert total.fields.get(name, {}).get(kind, 0) == expected


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3)
)


@given(st.lists(st.dictionaries(field_names, scalars, max_size=3), max_size=6))
def test_profiling_pages_apart_adds_up_to_profiling_them_together(records: list[dict[str, Any]]) -> None:
    values = [encode(r) for r in records]
    half = len(values) // 2

    assert profile_values(values[:half], None) + profile_values(values[half:], None) == profile_values(values, None)


@given(profiles)
def test_a_profile_reads_back_from_its_json(profile: FieldProfile) -> None:
    assert FieldProfile.from_json(msgspec.json.decode(encode(profile.to_json()))) == profile


def test_the_first_profile_is_the_baseline_and_reports_no_drift() -> None:
    run = profile_values([encode({"a": 1})])

    drift = FieldProfile().compare(run)

    assert drift.baseline and not drift.drifted
    assert drift.to_json()["baseline"] is True
    assert drift.describe() == "drift: baseline (1 sampled records); nothing to compare with yet"


def test_new_missing_and_retyped_fields_are_reported_with_their_counts() -> None:
    baseline = profile_values([encode({"id": "x", "salary": 10, "city": "a"}) for _ in range(4)])
    run = profile_values(
        [encode({"id": "y", "salary": "10k", "remote": True}) for _ in range(3)] + [encode({"id": "z", "salary": 5})]
    )

    drift = baseline.compare(run)

    assert drift.to_json() == {
        "summary": drift.describe(),
        "baseline": False,
        "sampled_records": 4,
        "sample_per_page": 20,
        "new": [{"field": "remote", "types": {"boolean": 3}, "sampled_records": 3}],
        "missing": [
            {"field": "city", "baseline_types": ["string"], "baseline_records": 4, "baseline_sampled_records": 4}
        ],
        "retyped": [{"field": "salary", "from": ["integer"], "to": "string", "sampled_records": 3}],
        "unlisted": 0,
    }
    assert drift.describe() == (
        "drift: new field remote (boolean, 3 sampled records); missing field city (string; in 4 of 4 baseline "
        "records); retyped salary integer→string (3 sampled records)"
    )


def test_a_type_the_baseline_already_saw_is_no_retype() -> None:
    baseline = profile_values([encode({"n": 1}), encode({"n": None})])

    drift = baseline.compare(profile_values([encode({"n": None})]))

    assert not drift.drifted
    assert drift.describe() == "drift: none (1 sampled records)"


def test_a_run_that_profiled_no_record_misses_no_field() -> None:
    baseline = profile_values([encode({"n": 1})])

    drift = baseline.compare(FieldProfile())

    assert not drift.baseline and not drift.missing


@given(profiles, profiles)
def test_a_run_compared_with_a_baseline_that_holds_it_has_no_new_or_retyped_field(
    earlier: FieldProfile, run: FieldProfile
) -> None:
    drift = (earlier + run).compare(run)

    assert not drift.new and not drift.retyped


def test_a_task_that_profiles_nothing_says_so() -> None:
    drift = FieldProfile().compare(FieldProfile(), sample_per_page=0)

    assert drift.describe() == "drift: not profiled (drift_sample is 0)" and not drift.drifted


def test_a_source_with_countless_field_names_gets_a_small_profile_and_a_short_report() -> None:
    # 200,000 distinct field names (long ones too) in 40 records, beside the fields every record holds.
    records = [
        encode({"id": i, "aae397": "2026-12-01", **{f"f{i}-{j}-" + "x" * (j % 300): j for j in range(5_000)}})
        for i in range(40)
    ]

    profile = profile_values(records, sample=None)
    baseline = profile_values([encode({"id": 1, "aae397": "2026-12-01", "gone": 1})])
    drift = baseline.compare(profile)
    stored = encode(profile.to_json())
    report = encode(drift.to_json())

    assert len(profile.fields) == MAX_FIELDS + 1 and profile.fields["id"] == {"integer": 40}
    assert sum(profile.fields[OTHER].values()) == 40 * 5_000 - (MAX_FIELDS - 2), "every field counted once"
    assert all(len(name) <= MAX_NAME_CHARS + 1 for name in profile.fields)
    assert len(stored) < 150_000, f"{len(stored)} bytes stored per profile"
    assert len(drift.new) == MAX_LISTED and drift.unlisted == MAX_FIELDS + 1 - 2 - MAX_LISTED
    assert drift.missing[0].name == "gone" and drift.drifted
    assert len(report) < 30_000 and drift.describe().endswith(f"and {drift.unlisted} more changes not listed")
    assert len((profile + profile).fields) == MAX_FIELDS + 1, "profiles added stay bounded"


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.dictionaries(json_types, st.integers(1, 9)), max_size=40))
def test_bounding_keeps_every_count_and_the_most_held_fields(fields: dict[str, dict[str, int]]) -> None:
    kept = drift_module.bounded({k: dict(v) for k, v in fields.items()}, most=5)

    assert len(kept) <= 5 + 1
    total = sum(n for types in fields.values() for n in types.values())
    assert sum(n for types in kept.values() for n in types.values()) == total
    held = sorted((sum(types.values()) for name, types in fields.items() if name != OTHER), reverse=True)
    named = sorted((sum(types.values()) for name, types in kept.items() if name != OTHER), reverse=True)
    assert named == held[:5], "the fields most records held keep their names"
