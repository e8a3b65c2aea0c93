"""Unit tests of message shaping: key, header and timestamp of each kept record (crawler_ops.message.shaping and the
page filter that applies it), and the config that names them."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from crawler_ops.config.kafka import KafkaConfig
from crawler_ops.message.filtering import DateRule, Window, record_date
from crawler_ops.message.records import Message, build_messages, dead_letter_messages, too_large
from crawler_ops.message.shaping import MessageShape, Template, epoch_ms, hash_key
from crawler_ops.results import DeadLetter

RULE = DateRule(("aae397", "Collect_time"), "Asia/Shanghai")
SHANGHAI = ZoneInfo("Asia/Shanghai")
REF = datetime(2026, 11, 20, 12, tzinfo=UTC)
WINDOW = Window.since(REF, days=7, now=REF, tolerance=timedelta(hours=24))
HEADERS = [("crawl_task", b"t"), ("run_id", b"r")]
RUN = {"task": "t", "run_id": "r", "ref": REF.isoformat()}


def raw_page(records: list[dict[str, Any]]) -> list[msgspec.Raw]:
    return [msgspec.Raw(msgspec.json.encode(r)) for r in records]


def shape(**kafka: Any) -> MessageShape:
    return KafkaConfig(topic="t", **kafka).shape


def kept(records: list[dict[str, Any]], message_shape: MessageShape, first: int = 100, **kw: Any) -> list[Message]:
    result = build_messages(raw_page(records), first, RULE, WINDOW, message_shape, HEADERS, run=RUN, **kw)
    return result.messages


# --- templates ------------------------------------------------------------------------------------------------------


def test_a_template_reads_fields_and_literal_braces() -> None:
    template = Template.parse("{site}/{{x}}/{id}-{site}")
    assert template.names == ("site", "id")
    assert template.render(["bj", 7]) == "bj/{x}/7-bj"
    assert template.render(["bj", None]) is None
    assert template.render(["", 7]) is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{a", "is not closed"),
        ("a}", "closes nothing"),
        ("{}", "names no field"),
        ("{run.when}", "unknown {run.when}"),
    ],
)
def test_a_bad_template_says_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Template.parse(text)


def test_a_key_may_not_read_run_metadata() -> None:
    with pytest.raises(ValidationError, match=r"key_template: .*run metadata, not allowed here"):
        KafkaConfig(topic="t", key_template="{id}-{run.run_id}")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20))
def test_literal_text_with_doubled_braces_renders_as_itself(text: str) -> None:
    escaped = text.replace("{", "{{").replace("}", "}}")
    assert Template.parse(escaped).render([]) == text


# --- config ---------------------------------------------------------------------------------------------------------


def test_only_one_way_of_keying_is_allowed() -> None:
    with pytest.raises(ValidationError, match="set only one of key_field, key_fields and key_template"):
        KafkaConfig(topic="t", key_field="code", key_fields=["a"])
    with pytest.raises(ValidationError, match="got key_fields and key_template"):
        KafkaConfig(topic="t", key_fields=["a"], key_template="{a}")


def test_a_header_may_not_take_a_fixed_name_and_a_bad_one_is_named() -> None:
    with pytest.raises(ValidationError, match="source_offset is a header every message carries already"):
        KafkaConfig(topic="t", headers={"source_offset": "{id}"})
    with pytest.raises(ValidationError, match=r"headers.site: template '\{site': "):
        KafkaConfig(topic="t", headers={"site": "{site"})


def test_the_default_shape_is_the_id_field_and_the_record_date() -> None:
    default = shape()
    assert default.key_field == "id" and default.record_time and default.headers == ()
    assert shape(key_fields=["site", "id"]).key.text == "{site}:{id}"  # type: ignore[union-attr]
    assert shape(key_field=None).key is None
    assert not shape(timestamp="produce_time").record_time


# --- keys -----------------------------------------------------------------------------------------------------------


def test_key_fields_join_the_values_and_a_record_lacking_one_is_keyed_by_its_hash() -> None:
    records = [
        {"id": 1, "site": "bj", "aae397": "2026-11-19 08:00:00"},
        {"id": 2, "aae397": "2026-11-19 08:00:00"},
    ]
    messages = kept(records, shape(key_fields=["site", "id"]))
    assert messages[0].key == b"bj:1"
    assert messages[1].key == hash_key(records[1])


def test_a_key_template_keys_a_transformed_record_by_the_source_record() -> None:
    records = [{"id": 3, "site": "sh", "aae397": "2026-11-19 08:00:00"}]
    messages = kept(records, shape(key_template="{site}/{id}"), transform=lambda r: {"only": r["id"]})
    assert messages[0].key == b"sh/3" and msgspec.json.decode(messages[0].value) == {"only": 3}


def test_a_dead_letter_is_keyed_as_the_topic_keys_records() -> None:
    record = {"id": 4, "site": "gz"}
    letters = dead_letter_messages(
        [DeadLetter(9, "bad date", record)], "dlq", "t", "r", shape(key_fields=["site", "id"]), HEADERS
    )
    assert letters[0].key == b"gz:4" and letters[0].timestamp == 0


# --- headers --------------------------------------------------------------------------------------------------------


def test_headers_render_record_fields_and_run_metadata_and_leave_out_what_has_no_value() -> None:
    records = [
        {"id": 1, "site": "bj", "aae397": "2026-11-19 08:00:00"},
        {"id": 2, "site": "", "aae397": "2026-11-19 08:00:00"},
    ]
    templates = {"site": "{site}", "from": "{run.task}@{run.offset}", "ref": "{run.ref}", "id": "{run.run_id}:{id}"}
    first, second = kept(records, shape(headers=templates), first=40)
    assert first.headers == [
        *HEADERS,
        ("source_offset", b"40"),
        ("site", b"bj"),
        ("from", b"t@40"),
        ("ref", REF.isoformat().encode()),
        ("id", b"r:1"),
    ]
    assert [name for name, _ in second.headers] == ["crawl_task", "run_id", "source_offset", "from", "ref", "id"]


def test_headers_count_towards_the_message_size_when_a_task_sets_its_own() -> None:
    message = Message(b"k", b"v" * 1000, [("crawl_task", b"t"), ("source_offset", b"5"), ("big", b"x" * 200)])
    assert too_large([message], [{"id": 1}], 5, 1100) == ([message], [])
    kept_, dead = too_large([message], [{"id": 1}], 5, 1100, with_headers=True)
    assert kept_ == [] and "with its headers is larger than kafka.max_message_bytes (1100)" in dead[0].reason


# --- timestamps -----------------------------------------------------------------------------------------------------


def test_the_timestamp_is_the_record_date_naive_dates_in_the_rule_zone() -> None:
    records = [
        {"id": 1, "aae397": "2026-11-19 08:00:00"},
        {"id": 2, "aae397": "2026-11-19T08:00:00+00:00"},
        {"id": 3, "aae397": "bad", "Collect_time": "2026/11/18 10:30"},
        {"id": 4, "aae397": 1795046400},
    ]
    stamps = [m.timestamp for m in kept(records, shape())]
    assert stamps == [
        int(datetime(2026, 11, 19, 8, tzinfo=SHANGHAI).timestamp()) * 1000,
        int(datetime(2026, 11, 19, 8, tzinfo=UTC).timestamp()) * 1000,
        int(datetime(2026, 11, 18, 10, 30, tzinfo=SHANGHAI).timestamp()) * 1000,
        1795046400 * 1000,
    ]


def test_produce_time_leaves_the_timestamp_to_the_producer() -> None:
    records = [{"id": 1, "aae397": "2026-11-19 08:00:00"}]
    assert [m.timestamp for m in kept(records, shape(timestamp="produce_time"))] == [0]


def test_an_expired_or_undated_record_has_no_message_and_shifts_no_timestamp() -> None:
    records = [
        {"id": 1, "aae397": "2020-01-01 00:00:00"},
        {"id": 2, "aae397": None},
        {"id": 3, "aae397": "2026-11-19 09:00:00.250"},
    ]
    result = build_messages(raw_page(records), 0, RULE, WINDOW, shape(), HEADERS, run=RUN)
    assert [(m.key, m.timestamp) for m in result.messages] == [
        (b"3", int(datetime(2026, 11, 19, 9, tzinfo=SHANGHAI).timestamp()) * 1000 + 250)
    ]
    assert result.expired == 1 and len(result.dead_letters) == 1


moments = st.datetimes(
    min_value=datetime(2026, 11, 13, 13), max_value=datetime(2026, 11, 21, 11), timezones=st.none() | st.just(UTC)
)


@given(st.lists(moments, min_size=1, max_size=20), st.sampled_from(["iso", "space", "slash"]))
def test_every_kept_record_is_stamped_with_the_date_the_filter_read(dates: list[datetime], style: str) -> None:
    def text(moment: datetime) -> str:
        iso = moment.isoformat(timespec="milliseconds")
        return {"iso": iso, "space": iso.replace("T", " "), "slash": iso.replace("-", "/", 2)}[style]

    records = [{"id": i, "aae397": text(d)} for i, d in enumerate(dates)]
    result = build_messages(raw_page(records), 0, RULE, WINDOW, shape(), HEADERS, run=RUN)
    for message in result.messages:
        record = records[int(message.key)]
        moment, _ = record_date(record, RULE.fields, SHANGHAI)
        assert moment is not None and message.timestamp == epoch_ms(moment, SHANGHAI)
    assert len(result.messages) + result.expired + len(result.dead_letters) == len(records)


def test_epoch_ms_is_exact_to_the_millisecond() -> None:
    moment = datetime(2026, 11, 19, 8, 0, 0, 999_999, tzinfo=UTC)
    assert epoch_ms(moment, UTC) == int(datetime(2026, 11, 19, 8, tzinfo=UTC).timestamp()) * 1000 + 999


# --- routing --------------------------------------------------------------------------------------------------------


def test_a_topic_template_routes_records_and_one_lacking_the_field_stays_on_the_task_topic() -> None:
    records = [
        {"id": 1, "city_code": "bj", "aae397": "2026-11-19 08:00:00"},
        {"id": 2, "aae397": "2026-11-19 08:00:00"},
        {"id": 3, "city_code": "sh", "aae397": "2026-11-19 08:00:00"},
    ]
    messages = kept(records, shape(topic_template="jobs.{city_code}"))
    assert [(m.topic, m.routed) for m in messages] == [("jobs.bj", True), (None, False), ("jobs.sh", True)]
    transformed = kept(records[:1], shape(topic_template="jobs.{city_code}"), transform=lambda r: r)
    assert [(m.topic, m.routed) for m in transformed] == [("jobs.bj", True)]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("北京", "not a Kafka topic name"),
        ("a b", "not a Kafka topic name"),
        ("x" * 250, "not a Kafka topic name"),
    ],
)
def test_a_record_routed_to_a_name_kafka_refuses_is_dead_lettered_naming_it(value: str, reason: str) -> None:
    records = [{"id": 1, "city": value, "aae397": "2026-11-19 08:00:00"}]
    result = build_messages(raw_page(records), 7, RULE, WINDOW, shape(topic_template="{city}"), HEADERS, run=RUN)
    assert result.messages == [] and [d.offset for d in result.dead_letters] == [7]
    assert reason in result.dead_letters[0].reason and "topic_template gives" in result.dead_letters[0].reason


def test_no_record_is_routed_to_the_dead_letter_or_a_marker_topic() -> None:
    routed = shape(topic_template="{t}", dead_letter_topic="dead")
    for name in ("dead", "crawler_ops.batches.x"):
        records = [{"id": 1, "t": name, "aae397": "2026-11-19 08:00:00"}]
        result = build_messages(raw_page(records), 0, RULE, WINDOW, routed, HEADERS, run=RUN)
        assert result.messages == [] and "a topic of dead letters or markers" in result.dead_letters[0].reason


def test_a_record_routed_outside_the_routed_topics_is_dead_lettered_naming_its_topic() -> None:
    routed = shape(topic_template="jobs.{city}", routed_topics=["jobs.bj", "jobs.s?"])
    records = [{"id": i, "city": city, "aae397": "2026-11-19 08:00:00"} for i, city in enumerate(["bj", "sh", "x1"])]

    result = build_messages(raw_page(records), 0, RULE, WINDOW, routed, HEADERS, run=RUN)

    assert [m.topic for m in result.messages] == ["jobs.bj", "jobs.sh"]
    (dead,) = result.dead_letters
    assert (
        dead.offset == 2
        and dead.reason == "topic_template gives 'jobs.x1', not one of kafka.routed_topics; not published"
    )


def test_a_topic_template_reads_record_fields_only() -> None:
    with pytest.raises(ValidationError, match=r"topic_template: .*run metadata, not allowed here"):
        KafkaConfig(topic="t", topic_template="jobs.{run.task}")


def test_epoch_ms_reads_a_naive_date_as_a_wall_time_in_the_zone() -> None:
    wall = datetime(2026, 11, 19, 8, 0, 0, 999_999)
    expected = int(datetime(2026, 11, 19, 8, tzinfo=SHANGHAI).timestamp()) * 1000 + 999
    assert epoch_ms(wall, SHANGHAI) == expected == epoch_ms(wall.replace(tzinfo=SHANGHAI), SHANGHAI)
    assert epoch_ms(wall, SHANGHAI).__class__ is int


# --- template and shape details -------------------------------------------------------------------------------------


def test_only_doubled_braces_are_escapes_and_a_placeholder_may_not_hold_a_brace() -> None:
    assert Template.parse("aXX{id}XXb").render([1]) == "aXX1XXb"
    with pytest.raises(ValueError, match="placeholder at 0 names no field"):
        Template.parse("{a{b}")


def test_an_unknown_run_name_is_told_the_ones_there_are() -> None:
    with pytest.raises(ValueError, match=r"run metadata is run\.task, run\.run_id, run\.offset, run\.ref$"):
        Template.parse("{run.when}")


def test_a_shape_of_templates_carries_its_headers_and_timestamp_choice() -> None:
    made = MessageShape.of("{site}/{id}", {"from": "{run.task}"}, record_time=False)
    assert made.key == Template.parse("{site}/{id}") and not made.record_time
    assert made.headers == (("from", Template.parse("{run.task}")),)
    default = MessageShape.of("{id}")
    assert default.record_time and default.headers == ()
    assert MessageShape.of(None).key is None and MessageShape.of("").key is None


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_and_dot_dot_are_not_topics(name: str) -> None:
    assert "not a Kafka topic name" in str(MessageShape().topic_problem(name))


def test_a_refused_topic_name_is_quoted_up_to_300_characters() -> None:
    reason = str(MessageShape().topic_problem("x" * 400))
    assert reason.startswith(f"topic_template gives {'x' * 300!r}, not a Kafka topic name")


# --- timestamps and routing: details a consumer sees ----------------------------------------------------------------


def test_a_record_dated_ahead_of_the_clock_is_stamped_with_the_clock() -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    ahead = now + timedelta(hours=2)
    records = [
        {"id": 1, "aae397": ahead.astimezone(SHANGHAI).replace(tzinfo=None).isoformat(sep=" ")},
        {"id": 2, "aae397": ahead.isoformat()},
    ]
    window = Window.since(now, days=7, now=now, tolerance=timedelta(hours=24))
    before = int(time.time() * 1000)
    result = build_messages(raw_page(records), 0, RULE, window, shape(), HEADERS, run=RUN)
    after = int(time.time() * 1000)
    assert [m.key for m in result.messages] == [b"1", b"2"]
    assert all(before <= m.timestamp <= after for m in result.messages)


def test_timestamps_are_whole_milliseconds_rounded_down() -> None:
    records = [
        {"id": 1, "aae397": "2026-11-19 08:00:00.123456"},
        {"id": 2, "aae397": "2026-11-19T08:00:00.123456+00:00"},
    ]
    stamps = [m.timestamp for m in kept(records, shape())]
    assert stamps == [
        int(datetime(2026, 11, 19, 8, tzinfo=SHANGHAI).timestamp()) * 1000 + 123,
        int(datetime(2026, 11, 19, 8, tzinfo=UTC).timestamp()) * 1000 + 123,
    ]
    assert {s.__class__ for s in stamps} == {int}


def test_a_transformed_record_is_stamped_with_its_date_too() -> None:
    records = [{"id": 1, "aae397": "2026-11-19 08:00:00"}]
    (message,) = kept(records, shape(), transform=lambda r: {"only": r["id"]})
    assert message.timestamp == int(datetime(2026, 11, 19, 8, tzinfo=SHANGHAI).timestamp()) * 1000


def test_a_record_routed_to_a_bad_name_is_dead_lettered_whole_and_the_page_goes_on() -> None:
    records = [
        {"id": 1, "city": "a b", "aae397": "2026-11-19 08:00:00"},
        {"id": 2, "city": "bj", "aae397": "2026-11-19 08:00:00"},
    ]
    result = build_messages(raw_page(records), 7, RULE, WINDOW, shape(topic_template="{city}"), HEADERS, run=RUN)
    assert [(d.offset, d.record) for d in result.dead_letters] == [(7, records[0])]
    assert [(m.key, m.topic) for m in result.messages] == [(b"2", "bj")]


def test_the_key_counts_towards_the_message_size_with_the_headers() -> None:
    message = Message(b"k" * 100, b"v" * 1000, [("source_offset", b"5")])
    size = 1000 + 100 + len("source_offset") + 1
    assert too_large([message], [{"id": 1}], 5, size, with_headers=True) == ([message], [])
    kept_, dead = too_large([message], [{"id": 1}], 5, size - 1, with_headers=True)
    assert kept_ == [] and f"message of {size} bytes with its headers" in dead[0].reason


def test_a_key_field_given_as_text_is_that_field_s_shape_timestamped_when_produced() -> None:
    assert MessageShape.field("id") == MessageShape(Template.parse("{id}"), (), False)
    assert MessageShape.field("id", record_time=True).record_time
    records = [{"id": 1, "aae397": "2026-11-19 08:00:00"}]
    result = build_messages(raw_page(records), 0, RULE, WINDOW, "id", HEADERS)
    assert [(m.key, m.timestamp) for m in result.messages] == [(b"1", 0)]


BERLIN_RULE = DateRule(("aae397",), "Europe/Berlin")
AROUND_THE_CLOCK_CHANGE = st.datetimes(min_value=datetime(2026, 10, 24, 20), max_value=datetime(2026, 10, 25, 6))


@given(st.lists(AROUND_THE_CLOCK_CHANGE, min_size=1, max_size=30))
def test_wall_times_across_a_clock_change_are_stamped_as_epoch_ms_reads_them(dates: list[datetime]) -> None:
    """Europe/Berlin leaves summer time at 03:00 on 2026-10-25: the hour from 02:00 is read with its first offset
    (fold 0), as :func:`epoch_ms` does, and a page holding dates on both sides stamps each with its own offset."""
    berlin = ZoneInfo("Europe/Berlin")
    ref = datetime(2026, 10, 26, tzinfo=berlin)
    window = Window.since(ref, days=7, now=ref, tolerance=timedelta(hours=24))
    records = [{"id": i, "aae397": d.isoformat(sep=" ")} for i, d in enumerate(dates)]
    result = build_messages(raw_page(records), 0, BERLIN_RULE, window.in_zone(berlin), shape(), HEADERS, run=RUN)
    assert len(result.messages) == len(dates)
    read = [d.replace(fold=0) for d in dates]  # the text of a date has no fold
    assert [m.timestamp for m in result.messages] == [epoch_ms(d, berlin) for d in read]
