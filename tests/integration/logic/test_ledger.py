"""A chunk's ledger (crawler_ops.crawl.ledger) and the batch rows under it (crawler_ops.hooks.store.batches) on
PostgreSQL: claims per worker, the claim token's fence on finishing, giving back and parking, run counts."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from crawler_ops.crawl import ledger as ledger_module
from crawler_ops.crawl.ledger import DryRunLedger, RunRecordLedger, StatusTableLedger, ledger_for, parked_message
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.hooks.store.batches import BatchRows, ParkedBatch, StatusRow
from crawler_ops.hooks.store.hook import CrawlStoreHook
from crawler_ops.hooks.store.status_table import CLAIMED, DONE, PARKED, PENDING
from crawler_ops.message.records import DeadLetter
from crawler_ops.planning import Batch
from crawler_ops.results import BatchOutcome, RunCounts
from tests.integration.logic.conftest import DB_CONN
from tests.support import make_task

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
RUN = "run_a"


@pytest.fixture
def store(task: str) -> Iterator[CrawlStoreHook]:
    hook = CrawlStoreHook(DB_CONN, task)
    with hook.transaction() as cur:
        hook.start_run(cur, RUN, "incremental", REF, planned=3)
    yield hook
    hook.close()


def batch_rows(pg: psycopg.Connection[Any], task: str) -> dict[int, tuple[Any, ...]]:
    """lo -> (hi, status, attempts, claim_token, expired, run_id)."""
    found = pg.execute(
        "SELECT id, hi, status, attempts, claim_token, expired, run_id FROM crawler_ops.batch_status "
        "WHERE task_name = %s",
        (task,),
    ).fetchall()
    return {int(r[0]): tuple(r[1:]) for r in found}


def ledger(store: CrawlStoreHook, owner: str, token: str, lease_s: int = 600, attempts: int = 2) -> StatusTableLedger:
    return StatusTableLedger(store, RUN, owner, token, lease_s, attempts, CrawlStoreHook(DB_CONN, store.task_id))


def outcome(batch: Batch, kept: int = 1, **extra: Any) -> BatchOutcome:
    return BatchOutcome(batch, RunCounts(pages=1, fetched=kept, kept=kept, published=kept, batches_done=1), **extra)


def test_batch_rows_insert_read_clip_prune_and_reset(pg, store, task):
    rows = BatchRows(task)
    with store.transaction() as cur:
        rows.insert(cur, [Batch(0, 10), Batch(10, 20), Batch(20, 30)], RUN)
        rows.insert(cur, [Batch(10, 20), Batch(30, 40)], "run_b", expired=True)
        rows.insert(cur, [], RUN)
        assert rows.read(cur, 10) == [
            StatusRow(Batch(10, 20), PENDING),
            StatusRow(Batch(20, 30), PENDING),
            StatusRow(Batch(30, 40), DONE),
        ]
        assert rows.done(cur, 0) == [Batch(30, 40)]
        assert rows.done(cur, 40) == []
        assert rows.generations(cur, [Batch(10, 20), Batch(30, 40)]) == {10: RUN, 30: "run_b"}
        rows.clip(cur, 25)
    assert batch_rows(pg, task)[20][0] == 25, "a row not done reaching past the total ends at it"
    assert batch_rows(pg, task)[30][0] == 40, "a done row keeps its end"
    assert batch_rows(pg, task)[30][4] is True
    with store.transaction() as cur:
        rows.prune_below(cur, 20)
    assert sorted(batch_rows(pg, task)) == [20, 30]
    with store.transaction() as cur:
        rows.reset(cur)
    assert batch_rows(pg, task) == {}


def test_a_worker_holds_only_its_claims_and_a_finish_is_fenced_by_the_claim_token(pg, store, task):
    with store.transaction() as cur:
        store.batches.insert(cur, [Batch(0, 10), Batch(10, 20)], RUN)
    first, second = ledger(store, f"{RUN}|1", f"{RUN}|1|a"), ledger(store, f"{RUN}|2", f"{RUN}|2|b")
    try:
        assert first.claim(Batch(0, 10))
        assert not second.claim(Batch(0, 10)), "held by the first worker"
        assert second.claim(Batch(10, 20))
        assert first.renew(Batch(0, 10)) and not first.renew(Batch(10, 20))
        assert first.generations([Batch(0, 10)]) == {0: RUN}
        assert first.finish(outcome(Batch(0, 10)), next_batch=Batch(10, 20)) == (0, False)
        assert batch_rows(pg, task)[0][1:4] == (DONE, 1, f"{RUN}|1|a")
        assert batch_rows(pg, task)[10][1] == CLAIMED
        pg.execute(
            "UPDATE crawler_ops.batch_status SET start_time = now() - interval '1 hour' WHERE task_name = %s", (task,)
        )
        assert first.claim(Batch(10, 20)), "the second worker's lease lapsed"
        cutoff, held = second.finish(outcome(Batch(10, 20), kept=5, cutoff=7))
        assert (cutoff, held) == (7, True)
        assert batch_rows(pg, task)[10][1:4] == (CLAIMED, 0, f"{RUN}|1|a"), "the late finish changed nothing"
        with store.transaction() as cur:
            record = store.read_run(cur, RUN)
        assert record is not None and record.counts.kept == 6, "both batches' messages were published"
    finally:
        first.close()
        second.close()


def test_a_finish_counts_metrics_only_for_the_batch_the_worker_still_holds(pg, store, task, monkeypatch, caplog):
    counted: list[tuple[str, str, int]] = []
    monkeypatch.setattr(ledger_module.metrics, "count", lambda *args: counted.append(args))
    with store.transaction() as cur:
        store.batches.insert(cur, [Batch(0, 10)], RUN)
    mine = ledger(store, f"{RUN}|1", f"{RUN}|1|a")
    try:
        assert mine.claim(Batch(0, 10))
        pg.execute("UPDATE crawler_ops.batch_status SET claim_token = 'other|1|x' WHERE task_name = %s", (task,))
        caplog.set_level("WARNING", logger=ledger_module.__name__)
        mine.finish(outcome(Batch(0, 10), kept=3))
        assert counted == []
        assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
            (
                "WARNING",
                f"task {task}: batch [0, 10) was re-claimed by another worker after our lease expired; its messages "
                "are published (idempotent by key) but the other worker owns its status",
            )
        ], "the operator is told which task's batch another worker owns"
        caplog.clear()
        pg.execute("UPDATE crawler_ops.batch_status SET claim_token = %s WHERE task_name = %s", (f"{RUN}|1|a", task))
        mine.finish(outcome(Batch(0, 10), kept=3))
        assert (task, "kept", 3) in counted and (task, "batches_done", 1) in counted
        assert caplog.records == [], "a batch the worker still holds is finished without a warning"
    finally:
        mine.close()


def test_a_batch_skipped_as_expired_is_done_and_marked_expired(pg, store, task):
    with store.transaction() as cur:
        store.batches.insert(cur, [Batch(0, 10), Batch(10, 20), Batch(20, 30)], RUN)
    mine = ledger(store, f"{RUN}|1", f"{RUN}|1|a")
    try:
        for lo in (0, 10, 20):
            assert mine.claim(Batch(lo, lo + 10))
        held = mine.finish(outcome(Batch(0, 10), skipped_as_expired=True), next_batch=Batch(10, 20))
        assert held == (0, True), "the next batch is still this worker's"
        mine.finish(outcome(Batch(10, 20)))
        with store.transaction() as cur:
            assert store.batches.complete(cur, Batch(20, 30), f"{RUN}|1|a")
        assert batch_rows(pg, task)[0][1:5] == (DONE, 1, f"{RUN}|1|a", True)
        assert batch_rows(pg, task)[10][1:5] == (DONE, 1, f"{RUN}|1|a", False)
        assert batch_rows(pg, task)[20][1:5] == (DONE, 1, f"{RUN}|1|a", False), "not expired unless told"
    finally:
        mine.close()


def test_a_failure_gives_the_batches_back_parks_at_max_attempts_and_records_the_error(pg, store, task, caplog):
    with store.transaction() as cur:
        store.batches.insert(cur, [Batch(0, 10), Batch(10, 20), Batch(20, 30)], RUN)
        cur.execute(
            "UPDATE crawler_ops.batch_status SET attempts = 1, start_time = now() - interval '1 hour' "
            "WHERE task_name = %s AND id = 10",
            (task,),
        )
    mine = ledger(store, f"{RUN}|1", f"{RUN}|1|a", attempts=2)
    try:
        for lo in (0, 10, 20):
            assert mine.claim(Batch(lo, lo + 10))
        caplog.set_level("ERROR", logger=ledger_module.__name__)
        mine.fail([Batch(0, 10), Batch(10, 20)], "boom")
    finally:
        mine.close()
    rows = batch_rows(pg, task)
    assert rows[0][1:4] == (PENDING, 1, None)
    assert rows[10][1:4] == (PARKED, 2, None)
    assert rows[20][1] == CLAIMED, "not in flight: left alone"
    errors = pg.execute(
        "SELECT kind, source_offset, offset_end, reason FROM crawler_ops.crawl_error WHERE task_id = %s ORDER BY id",
        (task,),
    ).fetchall()
    assert [r.getMessage() for r in caplog.records] == [parked_message(task, Batch(10, 20), 2, "boom")]
    assert errors == [
        ("batch", 10, 20, parked_message(task, Batch(10, 20), 2, "boom")),
        ("batch", 0, 20, "boom"),
    ]
    with store.transaction() as cur:
        assert store.batches.parked(cur) == [ParkedBatch(Batch(10, 20), 2, "boom")]
        assert store.batches.skip_parked(cur, lo=0) == []
        assert store.batches.skip_parked(cur) == [ParkedBatch(Batch(10, 20), 2, "boom")]
        assert store.batches.parked(cur) == []
        cur.execute("UPDATE crawler_ops.batch_status SET status = 3, last_error = NULL WHERE task_name = %s", (task,))
        assert store.batches.parked(cur)[0].error == "", "a parked row without an error"
    assert batch_rows(pg, task)[10][1] == PARKED


def test_a_failure_that_cannot_be_recorded_does_not_raise(store, monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW_CONN_MUT_DEAD_DB", "postgresql://nobody:x@127.0.0.1:9/none")
    broken = RunRecordLedger(CrawlStoreHook("mut_dead_db", store.task_id), RUN)
    caplog.set_level("ERROR", logger=ledger_module.__name__)
    broken.fail([Batch(0, 10)], "boom")
    [logged] = [r for r in caplog.records if r.name == ledger_module.__name__]
    assert (logged.levelname, logged.getMessage()) == (
        "ERROR",
        f"task {store.task_id}: could not record the failure; the commit step releases this run's claims",
    ), "the operator is told which task's failure went unrecorded"
    assert logged.exc_info is not None, "with the database error that stopped it"


def test_a_finished_run_s_claims_go_back_and_a_run_releases_only_its_own(pg, store, task):
    with store.transaction() as cur:
        store.batches.insert(cur, [Batch(0, 10), Batch(10, 20), Batch(20, 30)], RUN)
        store.start_run(cur, "run_b", "incremental", REF)
        store.start_run(cur, "run_a2", "incremental", REF)
        store.batches.claim(cur, Batch(0, 10), f"{RUN}|1", f"{RUN}|1|x", 600)
        store.batches.claim(cur, Batch(10, 20), "run_b|1", "run_b|1|y", 600)
        store.batches.claim(cur, Batch(20, 30), "run_a2|1", "run_a2|1|z", 600)
        store.finish_run(cur, "run_b", "success", None, [])
        store.batches.release_finished_claims(cur)
    rows = batch_rows(pg, task)
    assert (rows[0][1], rows[10][1], rows[20][1]) == (CLAIMED, PENDING, CLAIMED)
    with store.transaction() as cur:
        assert store.batches.release_run(cur, RUN) == 1
    assert batch_rows(pg, task)[20][1] == CLAIMED, "run_a2 is another run"


def test_a_run_record_ledger_claims_nothing_and_adds_counts_and_dead_letters(pg, store, task, monkeypatch):
    counted: list[tuple[str, str, int]] = []
    monkeypatch.setattr(ledger_module.metrics, "count", lambda *args: counted.append(args))
    replay = RunRecordLedger(store, RUN)
    letter = DeadLetter(3, "bad", {"id": 3})
    assert replay.claim(Batch(0, 10)) and replay.renew(Batch(0, 10))
    assert replay.generations([Batch(0, 10)]) == {}
    assert replay.finish(outcome(Batch(0, 10), kept=4, dead_letters=(letter,)), next_batch=Batch(10, 20)) == (0, True)
    replay.fail([], "plan broke")
    with store.transaction() as cur:
        record = store.read_run(cur, RUN)
    assert record is not None and record.counts.kept == 4 and "plan broke" in record.errors
    assert (task, "kept", 4) in counted, "a replay's batches are its own to count"
    kinds = pg.execute(
        "SELECT kind, source_offset, offset_end FROM crawler_ops.crawl_error WHERE task_id = %s ORDER BY id", (task,)
    ).fetchall()
    assert kinds == [("record", 3, None), ("batch", None, None)]
    assert batch_rows(pg, task) == {}


def test_a_dry_run_ledger_writes_nothing():
    dry = DryRunLedger()
    assert dry.claim(Batch(0, 1)) and dry.renew(Batch(0, 1))
    assert dry.finish(outcome(Batch(0, 1))) == (0, True)
    assert dry.generations([Batch(0, 1)]) == {}
    dry.fail([Batch(0, 1)], "x")
    dry.close()


def test_each_kind_of_run_gets_its_ledger(task):
    cfg = make_task(task, claim_lease_s=77, max_attempts=4)
    assert isinstance(
        ledger_for(RunContext(cfg=cfg, run_id=RUN, ref=REF, params=RunParams(dry_run=True)), "o", "t"), DryRunLedger
    )
    replay = ledger_for(
        RunContext(cfg=cfg, run_id=RUN, ref=REF, params=RunParams(replay_from=0, replay_to=5)), "o", "t"
    )
    assert type(replay) is RunRecordLedger and replay.run_id == RUN and replay.store.task_id == task
    crawl = ledger_for(RunContext(cfg=cfg, run_id=RUN, ref=REF, params=RunParams()), "o|1", "o|1|t")
    assert isinstance(crawl, StatusTableLedger)
    assert (crawl.run_id, crawl.owner, crawl.token, crawl.lease_s, crawl.max_attempts) == (RUN, "o|1", "o|1|t", 77, 4)
    assert crawl.store.task_id == task and crawl.claims.task_id == task and crawl.claims is not crawl.store
    assert crawl.store.postgres_conn_id == crawl.claims.postgres_conn_id == cfg.postgres_conn_id
    for ledger_ in (replay, crawl):
        ledger_.close()


@pytest.mark.parametrize("kind", ["status_table", "run_record"])
def test_a_batchs_dead_letters_and_its_done_mark_are_written_together_or_not_at_all(pg, store, task, monkeypatch, kind):
    """A finish that fails after its dead letters were written (the worker killed, PostgreSQL gone) leaves neither:
    the batch's next attempt writes them again, so a dead letter is never stored twice nor without its batch."""
    with store.transaction() as cur:
        store.batches.insert(cur, [Batch(0, 10)], RUN)
    owner = ledger(store, f"{RUN}|1", f"{RUN}|1|a") if kind == "status_table" else RunRecordLedger(store, RUN)
    assert owner.claim(Batch(0, 10))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise psycopg.OperationalError("the server closed the connection")

    target = "finish_batch" if kind == "status_table" else "add_batch_counts"
    if kind == "status_table":
        monkeypatch.setattr(ledger_module, target, broken)
    else:
        monkeypatch.setattr(store, target, broken)
    letter = DeadLetter(3, "bad date", {"id": 3})
    with pytest.raises(Exception, match="closed the connection"):
        owner.finish(outcome(Batch(0, 10), kept=4, dead_letters=(letter,)))

    letters = pg.execute("SELECT count(*) FROM crawler_ops.crawl_error WHERE task_id = %s", (task,)).fetchone()
    assert letters == (0,), "the dead letter went with its failed finish"
    assert batch_rows(pg, task)[0][1] == (CLAIMED if kind == "status_table" else PENDING), "not done"
