"""A page filtered into its batch's messages, and a first crawl's early stop, without services.

The early stop decides which offsets a first crawl never reads: stopping one page too soon loses data silently,
so the streak that triggers it is pinned down page by page here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.batch_filter import BatchFilter, FilteredBatch
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.errors import SourceError
from crawler_ops.message.schemas import json_schema
from crawler_ops.message.values import ValueCodec
from crawler_ops.planning import Batch
from crawler_ops.results import DeadLetter, RunCounts

REF = datetime(2026, 11, 1, tzinfo=UTC)
KEPT = (REF - timedelta(hours=1)).isoformat()
OLD = (REF - timedelta(days=30)).isoformat()


def make_filter(early_stop: bool = True, **overrides: Any) -> BatchFilter:
    base: dict[str, Any] = {
        "id": "unit",
        "kafka": {"topic": "t.unit", "key_field": "id"},
        "batch_size": 2,
        "max_expired_batches": 3,
    }
    cfg = CrawlTaskConfig.model_validate({**base, **overrides})
    return BatchFilter(RunContext(cfg=cfg, run_id="manual__unit", ref=REF, params=RunParams()), early_stop)


def page(lo: int, *dates: str) -> list[dict[str, Any]]:
    return [{"id": f"r{lo + i}", "aae397": date} for i, date in enumerate(dates)]


def cutoffs(batch_filter: BatchFilter, empty: list[bool]) -> list[int]:
    """The cutoff after each page of a first crawl going down from the top, ``empty[i]``: page i holds nothing
    in the window."""
    top = 2 * len(empty)
    out = []
    for index, is_empty in enumerate(empty):
        lo = top - 2 * (index + 1)
        dates = (OLD, OLD) if is_empty else (OLD, KEPT)
        out.append(batch_filter.filter(Batch(lo, lo + 2), page(lo, *dates)).cutoff)
    return out


def test_empty_pages_that_are_not_consecutive_never_stop_a_first_crawl():
    # Seven empty pages out of ten, never three in a row: stopping here would lose the kept records below.
    empty = [True, True, False, True, True, False, True, True, False, True]
    assert cutoffs(make_filter(), empty) == [0] * 10


def test_the_page_completing_max_expired_batches_consecutive_empty_pages_is_the_cutoff():
    empty = [False, True, True, True, True]
    # Pages (lo): 8, 6, 4, 2, 0. Three empty in a row end at page 2; the fourth one (page 0) is below it anyway.
    assert cutoffs(make_filter(), empty) == [0, 0, 0, 2, 0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=14), st.integers(1, 4))
def test_the_cutoff_is_set_exactly_where_the_run_of_empty_pages_reaches_max_expired_batches(empty, streak):
    batch_filter = make_filter(max_expired_batches=streak)
    top = 2 * len(empty)
    expected, run = [], 0
    for index, is_empty in enumerate(empty):
        run = run + 1 if is_empty else 0
        expected.append(top - 2 * (index + 1) if run >= streak else 0)
    assert cutoffs(batch_filter, empty) == expected


def test_a_crawl_that_is_not_a_first_crawl_never_stops_early():
    assert cutoffs(make_filter(early_stop=False), [True] * 6) == [0] * 6


def test_a_page_delivered_by_an_earlier_attempt_counts_in_the_streak_by_its_kept_records():
    batch_filter = make_filter(max_expired_batches=2)
    assert batch_filter.cutoff_after(Batch(8, 10), 0) == 0
    assert batch_filter.cutoff_after(Batch(6, 8), 1) == 0, "a page with kept records ends the streak"
    assert batch_filter.cutoff_after(Batch(4, 6), 0) == 0
    assert batch_filter.cutoff_after(Batch(2, 4), 0) == 2


def test_a_page_is_filtered_into_its_kept_messages_with_the_run_headers_and_exact_counts():
    batch_filter = make_filter(early_stop=False)
    filtered = batch_filter.filter(Batch(10, 13), page(10, KEPT, OLD, "not a date"))

    assert (filtered.fetched, filtered.kept, filtered.expired, filtered.cutoff) == (3, 1, 1, 0)
    [message] = filtered.messages
    assert message.key == b"r10" and msgspec.json.decode(message.value) == page(10, KEPT)[0]
    assert message.headers == [("crawl_task", b"unit"), ("run_id", b"manual__unit"), ("source_offset", b"10")]
    [dead] = filtered.dead_letters
    assert dead.offset == 12 and "no usable date" in dead.reason


def test_dead_letters_go_to_the_dead_letter_topic_after_the_kept_messages_when_one_is_configured():
    batch_filter = make_filter(early_stop=False, kafka={"topic": "t", "key_field": "id", "dead_letter_topic": "t.dlq"})
    filtered = batch_filter.filter(Batch(0, 2), page(0, "garbage", KEPT))

    assert [(m.topic, m.key) for m in filtered.messages] == [(None, b"r1"), ("t.dlq", b"r0")]
    assert filtered.kept == 1 and len(filtered.dead_letters) == 1
    dead = msgspec.json.decode(filtered.messages[1].value)
    assert (dead["task"], dead["run_id"], dead["source_offset"]) == ("unit", "manual__unit", 0)


def test_without_a_dead_letter_topic_dead_letters_are_only_counted():
    filtered = make_filter(early_stop=False).filter(Batch(0, 2), page(0, "garbage", KEPT))
    assert [m.key for m in filtered.messages] == [b"r1"] and len(filtered.dead_letters) == 1


def test_a_message_larger_than_kafka_accepts_is_a_dead_letter_and_not_published():
    batch_filter = make_filter(early_stop=False, kafka={"topic": "t", "key_field": "id", "max_message_bytes": 1024})
    records = [{**page(0, KEPT)[0], "big": "x" * 2000}, page(1, KEPT)[0]]
    filtered = batch_filter.filter(Batch(0, 2), records)

    assert [m.key for m in filtered.messages] == [b"r1"] and filtered.kept == 1
    assert [d.offset for d in filtered.dead_letters] == [0]


@pytest.mark.parametrize("count", [1, 3])
def test_a_page_of_another_length_than_its_batch_is_a_retriable_error(count):
    with pytest.raises(SourceError, match=rf"page \[0, 2\) returned {count} records, expected 2") as caught:
        make_filter().filter(Batch(0, 2), page(0, *[KEPT] * count))
    assert caught.value.retriable is True


def test_a_page_entry_that_is_not_a_record_is_a_permanent_error():
    with pytest.raises(SourceError, match="not a record") as caught:
        make_filter().filter(Batch(0, 2), [msgspec.Raw(b"[1]"), msgspec.Raw(b"{}")])
    assert caught.value.retriable is False


def test_an_outcome_counts_the_page_and_what_kafka_confirmed():
    dead = DeadLetter(1, "bad", {})
    filtered = FilteredBatch(Batch(0, 4), fetched=4, kept=2, expired=1, dead_letters=(dead,), cutoff=0)
    outcome = filtered.outcome(published=2)
    assert outcome.counts == RunCounts(
        pages=1, fetched=4, kept=2, published=2, expired=1, dead_lettered=1, batches_done=1
    )
    assert outcome.dead_letters == (dead,) and not outcome.skipped_as_expired


def test_an_outcome_of_a_batch_below_the_cutoff_has_no_page_and_is_skipped_as_expired():
    outcome = FilteredBatch(Batch(0, 4), skipped=True, cutoff=8).outcome(published=0)
    assert outcome.counts == RunCounts(batches_done=1) and outcome.skipped_as_expired and outcome.cutoff == 8


def test_an_outcome_of_a_batch_an_earlier_attempt_delivered_keeps_its_counts_as_one_batch_done():
    prior = RunCounts(pages=1, fetched=4, kept=3, published=3, batches_done=0, batches_skipped=1)
    outcome = FilteredBatch(Batch(0, 4), prior=prior, cutoff=2).outcome(published=0)
    assert outcome.counts == RunCounts(pages=1, fetched=4, kept=3, published=3, batches_done=1)
    assert outcome.dead_letters == () and outcome.cutoff == 2


def tag(record: dict[str, Any]) -> dict[str, Any]:
    """A transform for the tests: the record's id only, tagged."""
    return {"tagged": record["id"]}


def tag_with_task(record: dict[str, Any], *, task_id: str) -> dict[str, Any]:
    return {"tagged": record["id"], "by": task_id}


def test_the_configured_transform_reshapes_each_kept_record():
    batch_filter = make_filter(early_stop=False, transform=f"{__name__}.tag")
    filtered = batch_filter.filter(Batch(0, 2), page(0, KEPT, OLD))
    assert [msgspec.json.decode(m.value) for m in filtered.messages] == [{"tagged": "r0"}]


def test_a_transform_asking_for_the_task_id_gets_it():
    batch_filter = make_filter(early_stop=False, transform=f"{__name__}.tag_with_task")
    filtered = batch_filter.filter(Batch(0, 2), page(0, KEPT, OLD))
    assert [msgspec.json.decode(m.value) for m in filtered.messages] == [{"tagged": "r0", "by": "unit"}]


def test_the_window_is_expressed_in_the_zone_object_of_the_date_rule_so_naive_dates_compare_as_wall_times():
    batch_filter = make_filter()
    tz = batch_filter.cfg.filter.rule.tz
    assert batch_filter.window.start.tzinfo is tz and batch_filter.window.end.tzinfo is tz


def test_the_early_stop_is_logged_with_the_streak_and_the_cutoff(caplog):
    with caplog.at_level("INFO", logger="crawler_ops.crawl.batch_filter"):
        cutoffs(make_filter(max_expired_batches=2), [True, True])
    assert [r.getMessage() for r in caplog.records] == [
        "task unit: 2 consecutive pages without in-window records; offsets below 0 are treated as expired"
    ]


def test_the_drift_profile_of_a_transformed_batch_is_of_what_consumers_read():
    from crawler_ops.crawl.chunk import published_profile

    batch_filter = make_filter(early_stop=False, transform=f"{__name__}.tag")
    filtered = batch_filter.filter(Batch(0, 2), page(0, KEPT, OLD))

    assert published_profile(filtered, 20).fields == {"tagged": {"string": 1}}


# --- value schema contract -------------------------------------------------------------------------------------------


def framed_filter(contract: str) -> BatchFilter:
    batch_filter = make_filter(kafka={"topic": "t.unit", "value_format": "json_schema", "contract": contract})
    batch_filter.codec = ValueCodec("json_schema", 7, json_schema(page(0, KEPT), closed=True))
    return batch_filter


def raw_page(records: list[dict[str, Any]]) -> list[msgspec.Raw]:
    return [msgspec.Raw(msgspec.json.encode(record)) for record in records]


def test_discard_row_dead_letters_a_record_that_does_not_fit_and_frames_the_others() -> None:
    records = [{"id": "r0", "aae397": KEPT}, {"id": "r1", "aae397": KEPT, "salary": 9}]
    filtered = framed_filter("discard_row").filter(Batch(0, 2), raw_page(records))
    assert [m.value for m in filtered.messages] == [b"\x00\x00\x00\x00\x07" + msgspec.json.encode(records[0])]
    [letter] = filtered.dead_letters
    assert letter.offset == 1
    assert letter.reason == "does not fit the value schema (id 7): field 'salary' is not in the schema; not published"
    assert letter.record == records[1]
    assert filtered.kept == 1


def test_freeze_fails_the_batch_naming_the_offset_and_the_field() -> None:
    records = [{"id": "r0", "aae397": KEPT}, {"id": 1, "aae397": KEPT}]
    with pytest.raises(SourceError, match=r"the record at source offset 1 does not fit .* at `\$\.id`") as caught:
        framed_filter("freeze").filter(Batch(0, 2), raw_page(records))
    assert not caught.value.retriable


def test_an_expired_record_is_not_checked_against_the_schema() -> None:
    records = [{"id": "r0", "aae397": KEPT}, {"id": 1, "aae397": OLD, "other": []}]
    filtered = framed_filter("freeze").filter(Batch(0, 2), raw_page(records))
    assert (filtered.kept, filtered.expired, filtered.dead_letters) == (1, 1, ())


def test_a_framed_value_counts_its_five_bytes_against_max_message_bytes() -> None:
    filler = "x" * (1024 - len(msgspec.json.encode({"id": "r0", "aae397": KEPT, "f": ""})) - len("r0"))
    records = [{"id": "r0", "aae397": KEPT, "f": filler}]
    plain = make_filter(kafka={"topic": "t.unit", "max_message_bytes": 1024})
    assert plain.filter(Batch(0, 1), raw_page(records), exact=False).kept == 1
    framed = make_filter(kafka={"topic": "t.unit", "max_message_bytes": 1024, "value_format": "json_schema"})
    framed.codec = ValueCodec("json_schema", 7, json_schema(records, closed=True))
    filtered = framed.filter(Batch(0, 1), raw_page(records), exact=False)
    assert filtered.kept == 0
    assert "message of 1029 bytes" in filtered.dead_letters[0].reason
