"""A run's field drift profile in PostgreSQL (crawl_run.drift_profile, added by each finished batch in its
transaction; crawler_ops.hooks.store.hook.DriftRows): profiles add up field by field and type by type, also when workers
finish batches at the same time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from crawler_ops.drift import MAX_FIELDS, OTHER, FieldProfile
from crawler_ops.hooks.store.hook import CrawlStoreHook
from crawler_ops.planning import Batch
from crawler_ops.results import BatchOutcome, RunCounts, RunRecord
from tests.integration.logic.conftest import DB_CONN

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
RUN = "run_a"
WORKERS, BATCHES = 4, 10


@pytest.fixture
def store(task: str) -> Iterator[CrawlStoreHook]:
    hook = CrawlStoreHook(DB_CONN, task)
    with hook.transaction() as cur:
        hook.start_run(cur, RUN, "incremental", REF, planned=WORKERS * BATCHES)
    yield hook
    hook.close()


def profile_of(worker: int, i: int) -> FieldProfile:
    """Batch ``i`` of ``worker``: a field every batch has, one of each worker's own, types that vary."""
    kind = "integer" if i % 2 else "string"
    return FieldProfile(3, {"id": {"string": 3}, f"w{worker}": {kind: 2, "null": 1}})


def test_batches_finished_at_once_add_their_profiles_field_by_field(store, task):
    def finish(worker: int) -> None:
        own = CrawlStoreHook(DB_CONN, task)
        try:
            for i in range(BATCHES):
                lo = (worker * BATCHES + i) * 10
                done = BatchOutcome(Batch(lo, lo + 10), RunCounts(kept=3, published=3), profile=profile_of(worker, i))
                with own.transaction() as cur:
                    own.add_batch_counts(cur, RUN, done)
        finally:
            own.close()

    threads = [threading.Thread(target=finish, args=(w,)) for w in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with store.transaction() as cur:
        record = store.read_run(cur, RUN)
    assert isinstance(record, RunRecord)
    expected = FieldProfile()
    for worker in range(WORKERS):
        for i in range(BATCHES):
            expected += profile_of(worker, i)
    assert record.profile == expected
    assert record.profile.sampled_records == record.counts.kept == WORKERS * BATCHES * 3
    assert record.profile.fields["w0"] == {"string": 10, "integer": 10, "null": 10}


def test_a_batch_that_profiled_nothing_leaves_the_profile_as_it_is_and_a_restart_clears_it(store, task):
    with store.transaction() as cur:
        store.add_batch_counts(cur, RUN, BatchOutcome(Batch(0, 10), RunCounts(), profile=profile_of(0, 0)))
        store.add_batch_counts(cur, RUN, BatchOutcome(Batch(10, 20), RunCounts()))
        kept = store.read_run(cur, RUN)
        store.start_run(cur, RUN, "incremental", REF, planned=2)
        restarted = store.read_run(cur, RUN)

    assert kept is not None and kept.profile == profile_of(0, 0)
    assert restarted is not None and restarted.profile == FieldProfile()


def test_the_baseline_reads_back_with_the_run_that_last_added_to_it(store, task):
    before, after = profile_of(0, 0), profile_of(0, 0) + profile_of(1, 1)
    with store.transaction() as cur:
        assert store.drift.read_baseline(cur) is None
        store.drift.save_baseline(cur, RUN, after, before)
        store.drift.save_baseline(cur, RUN, after, before)  # a repeated commit writes the same row
        saved = store.drift.read_baseline(cur)

    assert saved is not None and (saved.profile, saved.run_id, saved.before) == (after, RUN, before)


def test_a_run_of_batches_with_countless_field_names_keeps_a_bounded_profile_that_sql_and_python_agree_on(store):
    # Each batch brings MAX_FIELDS names of its own (a hostile source), beside a field every record holds.
    batches = [
        FieldProfile(4, {"id": {"string": 4}, **{f"b{i}-{j}": {"integer": 1 + j % 3} for j in range(MAX_FIELDS)}})
        for i in range(6)
    ]
    with store.transaction() as cur:
        for i, profile in enumerate(batches):
            store.add_batch_counts(cur, RUN, BatchOutcome(Batch(i * 10, i * 10 + 10), RunCounts(), profile=profile))
        record = store.read_run(cur, RUN)

    assert record is not None
    expected = FieldProfile()
    for profile in batches:
        expected += profile
    assert len(record.profile.fields) == MAX_FIELDS + 1
    assert record.profile == expected, "the row's merge is FieldProfile.__add__'s"
    assert record.profile.fields["id"] == {"string": 24}
    every = sum(n for p in batches for types in p.fields.values() for n in types.values())
    assert sum(n for types in record.profile.fields.values() for n in types.values()) == every
    assert OTHER in record.profile.fields
