"""Crawl batch claims and their leases on the real PostgreSQL (``crawler_ops.batch_status`` through
:class:`crawler_ops.hooks.store.batches.BatchRows`), each worker on a connection of its own as chunks are.

A claim holds for ``claim_lease_s`` from its start time. Another run may take it over only once that has passed; the
worker that held it may then neither renew nor complete nor fail it (the claim token fences it). A later try of the
same worker (same run and map index) takes its own earlier claim at once, and only its own. A lease lapses here by
moving the claim's start time back, as the passing of time would, so no test waits for a clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from crawler_ops.crawl.ledger import StatusTableLedger
from crawler_ops.hooks.store.batches import BatchRows
from crawler_ops.hooks.store.db import create_schema
from crawler_ops.hooks.store.hook import CrawlStoreHook
from crawler_ops.planning import Batch
from crawler_ops.results import BatchOutcome, RunCounts

pytestmark = pytest.mark.integration

LEASE_S = 60
FIRST, SECOND = Batch(0, 100), Batch(100, 200)


class Worker:
    """One chunk attempt: its claim owner (``run_id|map_index``) and token, on a connection of its own; each call is
    a transaction of its own."""

    def __init__(self, pg_uri: str, rows: BatchRows, run_id: str, map_index: int, try_number: int = 1) -> None:
        self.conn = psycopg.connect(pg_uri)
        self.rows = rows
        self.owner = f"{run_id}|{map_index}"
        self.token = f"{self.owner}|{try_number}|{uuid.uuid4().hex[:12]}"

    def call(self, name: str, batch: Batch, *args: Any) -> Any:
        with self.conn.transaction(), self.conn.cursor() as cur:
            return getattr(self.rows, name)(cur, batch, *args)

    def claim(self, batch: Batch) -> bool:
        return bool(self.call("claim", batch, self.owner, self.token, LEASE_S))

    def renew(self, batch: Batch) -> bool:
        return bool(self.call("renew", batch, self.token))

    def complete(self, batch: Batch) -> bool:
        return bool(self.call("complete", batch, self.token))

    def fail(self, batch: Batch, error: str) -> None:
        self.call("release", batch, self.token, error, 3)


@pytest.fixture
def batch_rows(pg_uri: str, unique_id: str) -> Iterator[BatchRows]:
    """A task's two pending batch rows, [0, 100) and [100, 200); removed afterwards."""
    rows = BatchRows(unique_id)
    with psycopg.connect(pg_uri) as conn, conn.transaction(), conn.cursor() as cur:
        create_schema(cur)
        rows.insert(cur, [FIRST, SECOND], "planning-run")
    yield rows
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DELETE FROM crawler_ops.batch_status WHERE task_name = %s", (unique_id,))


@pytest.fixture
def workers(pg_uri: str, batch_rows: BatchRows) -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for worker in made:
        worker.conn.close()


def row(pg_uri: str, task: str, batch: Batch) -> dict[str, Any]:
    with psycopg.connect(pg_uri) as conn:
        cur = conn.execute(
            "SELECT status, claim_token, attempts, last_error FROM crawler_ops.batch_status"
            " WHERE task_name = %s AND id = %s",
            (task, batch.lo),
        )
        values = cur.fetchone()
        assert values is not None and cur.description is not None
        return dict(zip([c.name for c in cur.description], values, strict=True))


def claimed_since(pg_uri: str, task: str, batch: Batch, seconds: int) -> None:
    """Move the claim of ``batch`` back to ``seconds`` before now, as if it had been made that long ago."""
    with psycopg.connect(pg_uri) as conn:
        moved = conn.execute(
            "UPDATE crawler_ops.batch_status SET start_time = now() - make_interval(secs => %s)"
            " WHERE task_name = %s AND id = %s AND status = 1 RETURNING id",
            (seconds, task, batch.lo),
        ).fetchall()
    assert moved == [(batch.lo,)], f"{batch} is not claimed"


def test_a_lapsed_claim_is_taken_over_by_another_run_and_its_old_holder_cannot_renew_complete_or_fail_it(
    pg_uri, unique_id, batch_rows, workers
):
    old = Worker(pg_uri, batch_rows, "old-run", 0)
    new = Worker(pg_uri, batch_rows, "new-run", 0)
    workers += [old, new]
    assert old.claim(FIRST)

    assert not new.claim(FIRST), "a live claim of another run is not taken"
    claimed_since(pg_uri, unique_id, FIRST, LEASE_S - 1)
    assert not new.claim(FIRST), "nor one whose lease has a second left"
    assert old.renew(FIRST), "a claim no one took over is renewed, even late"
    claimed_since(pg_uri, unique_id, FIRST, LEASE_S + 1)
    assert new.claim(FIRST), "a claim whose lease lapsed is taken over"

    assert not old.renew(FIRST), "the old holder learns it lost the claim"
    assert not old.complete(FIRST), "and cannot mark the batch done"
    old.fail(FIRST, "the old holder failed")
    taken = row(pg_uri, unique_id, FIRST)
    assert taken == {"status": 1, "claim_token": new.token, "attempts": 0, "last_error": None}, "nor fail it"

    assert new.complete(FIRST)
    assert row(pg_uri, unique_id, FIRST)["status"] == 2
    assert not old.claim(FIRST), "a done batch is never claimed again"


def test_a_later_try_of_a_worker_takes_its_own_live_claim_at_once_and_never_another_chunks(
    pg_uri, unique_id, batch_rows, workers
):
    chunk_1 = Worker(pg_uri, batch_rows, "run", 1)
    chunk_10 = Worker(pg_uri, batch_rows, "run", 10)
    retry_1 = Worker(pg_uri, batch_rows, "run", 1, try_number=2)
    workers += [chunk_1, chunk_10, retry_1]
    assert chunk_1.claim(FIRST) and chunk_10.claim(SECOND)

    assert retry_1.claim(FIRST), "its own earlier try cannot still be running: its claim is taken at once"
    assert not retry_1.claim(SECOND), "chunk 10's live claim is not chunk 1's, though 'run|10' starts with 'run|1'"

    assert not chunk_1.complete(FIRST), "the earlier try is fenced off"
    assert retry_1.complete(FIRST) and chunk_10.complete(SECOND)


def test_a_chunks_claim_is_committed_at_once_and_its_batch_completes_on_the_other_connection(
    pg_uri: str, unique_id: str, batch_rows: BatchRows
) -> None:
    """A chunk claims on a connection of its own, one statement committed on its own: the claim is visible to every
    other session at once, and the finish transaction on the chunk's other connection is not held up by it."""
    owner = "run_1|0"
    store, claims = CrawlStoreHook("crawler_db", unique_id), CrawlStoreHook("crawler_db", unique_id)
    ledger = StatusTableLedger(store, "run_1", owner, f"{owner}|1|t", LEASE_S, 3, claims)
    try:
        assert ledger.claim(FIRST)
        seen = row(pg_uri, unique_id, FIRST)
        assert (seen["status"], seen["claim_token"]) == (1, f"{owner}|1|t"), "committed: seen from another session"
        with store.transaction() as cur:
            cur.execute("SET LOCAL lock_timeout = '5s'")  # a claim left in an open transaction would hold the row
            assert store.batches.complete(cur, FIRST, f"{owner}|1|t")
        assert row(pg_uri, unique_id, FIRST)["status"] == 2
    finally:
        ledger.close()


def test_a_finished_batch_renews_the_next_claim_only_while_held_and_completes_only_its_own(
    pg_uri: str, unique_id: str, batch_rows: BatchRows, workers: list[Worker]
) -> None:
    """A chunk finishes a batch in one statement: it completes the batch and adds its counts to the run, and renews
    the next batch's claim, which another run took over once its lease lapsed: not held any more (the chunk must not
    produce it). Finishing that one later completes nothing: it is the other run's."""
    owner, token = "run_1|0", "run_1|0|1|t"
    store, claims = CrawlStoreHook("crawler_db", unique_id), CrawlStoreHook("crawler_db", unique_id)
    ledger = StatusTableLedger(store, "run_1", owner, token, LEASE_S, 3, claims)
    try:
        with store.transaction() as cur:
            store.start_run(cur, "run_1", "incremental", datetime(2026, 11, 20, tzinfo=UTC), total=200, planned=2)
        assert ledger.claim(FIRST) and ledger.claim(SECOND)
        claimed_since(pg_uri, unique_id, SECOND, LEASE_S + 1)
        other = Worker(pg_uri, batch_rows, "run_2", 0)
        workers.append(other)
        assert other.claim(SECOND)
        counts = RunCounts(pages=1, fetched=100, kept=40, published=40, expired=60, batches_done=1)

        assert ledger.finish(BatchOutcome(FIRST, counts), SECOND) == (0, False), "the next batch is not held"
        assert row(pg_uri, unique_id, FIRST)["status"] == 2
        assert ledger.finish(BatchOutcome(SECOND, counts), None) == (0, True)
        assert (row(pg_uri, unique_id, SECOND)["status"], row(pg_uri, unique_id, SECOND)["claim_token"]) == (
            1,
            other.token,
        ), "the other run's claim is left alone"
        with psycopg.connect(pg_uri) as conn:
            fetched = conn.execute(
                "SELECT fetched, kept FROM crawler_ops.crawl_run WHERE task_id = %s AND run_id = 'run_1'", (unique_id,)
            ).fetchone()
        assert fetched == (200, 80), "the run counts what it fetched and kept, the batch taken over too"
    finally:
        ledger.close()
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute("DELETE FROM crawler_ops.crawl_run WHERE task_id = %s", (unique_id,))


def test_a_claim_takes_the_batches_planned_after_it_in_the_same_statement_and_theirs_answer_from_it(
    pg_uri: str, unique_id: str, batch_rows: BatchRows, workers: list[Worker]
) -> None:
    """A fetch thread's claim takes the batches planned after its own in one statement; their fetch threads' claims
    then answer from what it got, without a statement of their own (a batch another run held stays not ours, even
    once it is released). A batch asked for again is claimed afresh."""
    third = Batch(200, 300)
    with psycopg.connect(pg_uri) as conn, conn.transaction(), conn.cursor() as cur:
        batch_rows.insert(cur, [third], "planning-run")
    other = Worker(pg_uri, batch_rows, "run_2", 0)
    workers.append(other)
    assert other.claim(third)
    owner, token = "run_1|0", "run_1|0|1|t"
    store, claims = CrawlStoreHook("crawler_db", unique_id), CrawlStoreHook("crawler_db", unique_id)
    ledger = StatusTableLedger(store, "run_1", owner, token, LEASE_S, 3, claims)
    try:
        assert ledger.claim(FIRST, [SECOND, third])
        assert (row(pg_uri, unique_id, SECOND)["status"], row(pg_uri, unique_id, SECOND)["claim_token"]) == (1, token)
        other.fail(third, "released before this worker's fetch of it")
        assert row(pg_uri, unique_id, third)["status"] == 0

        assert ledger.claim(SECOND, [third]), "claimed with the first batch"
        assert not ledger.claim(third), "held by another run when the first batch's claim was made"
        assert row(pg_uri, unique_id, third)["status"] == 0, "no statement was made for it"
        assert ledger.claim(third), "asked again: claimed afresh"
        assert row(pg_uri, unique_id, third)["claim_token"] == token
    finally:
        ledger.close()
