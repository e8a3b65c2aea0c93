"""An executor's rows of its status table (crawler_ops.hooks.store.status_table.ExecutorRows) on PostgreSQL: sync, the
claim order taking turns by category, the run's quota, the claim token's fence, giving back, parking and un-parking."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from crawler_ops.executor.tables import Tables
from crawler_ops.hooks.store.status_table import (
    CLAIMED,
    DONE,
    PARKED,
    PENDING,
    ClaimedRow,
    ExecutorRows,
    StatusTable,
    ensure_runs_table,
)

pytestmark = pytest.mark.integration

LEASE = (600, 30)  # lease_s, retry_s


def tables(
    pg: psycopg.Connection[Any], schema: str, *, category: str | None, round_robin: bool = False, epoch: bool = False
) -> Tables:
    """The source table and the status table (with INT epoch-second time columns when ``epoch``)."""
    if epoch:
        pg.execute(
            f'CREATE TABLE "{schema}".status (id bigint, status int, start_time bigint, end_time bigint, '
            "task_name varchar(100), UNIQUE (id, task_name))"
        )
    pg.execute(f'CREATE TABLE "{schema}".src (id bigint PRIMARY KEY, cat text, name text)')
    rows = [(1, "a", "z"), (2, "a", "y"), (3, "b", "x"), (4, "b", "w"), (5, "c", "v")]
    with pg.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema}".src VALUES (%s, %s, %s)', rows)
    with pg.transaction(), pg.cursor() as cur:
        status = StatusTable.ensure(cur, schema, "status")
        ensure_runs_table(cur)
    assert status.epoch_times is epoch
    return Tables(schema, "src", status, "id", (("id", "id"), ("name", "name")), ("name",), category, round_robin)


def claim(pg: psycopg.Connection[Any], t: Tables, rows: ExecutorRows, run: str, token: str, n: int) -> list[ClaimedRow]:
    with pg.transaction(), pg.cursor() as cur:
        return rows.claim(cur, t.parts(), run, token, n, LEASE)


def quota_used(pg: psycopg.Connection[Any], task: str, run: str) -> int | None:
    found = pg.execute(
        "SELECT claimed FROM crawler_ops.executor_run WHERE task_name = %s AND run_id = %s", (task, run)
    ).fetchone()
    return None if found is None else int(found[0])


def test_rows_are_synced_ranked_and_claimed_in_order_within_the_run_quota(pg, schema, task):
    t = tables(pg, schema, category="cat")
    rows = t.rows(task)
    with pg.cursor() as cur:
        assert rows.sync(cur, t.parts(), "a") == 2, "only the category's rows"
        assert rows.sync(cur, t.parts(), "a") == 0
        assert rows.rank(cur, t.parts(), "a") == 2
        assert rows.rank(cur, t.parts(), "a") == 0, "unchanged order: nothing to write"
        rows.open_run(cur, "run1", 1)
        rows.open_run(cur, "run1", 5)
    [first] = claim(pg, t, rows, "run1", "run1|0|a", 5)
    assert first == ClaimedRow(2, True, (2, "y")), "sorted by name: y before z"
    assert quota_used(pg, task, "run1") == 1
    assert claim(pg, t, rows, "run1", "run1|0|a", 5) == [], "the quota of 1 is used up"
    with pg.cursor() as cur:
        rows.uncount(cur, "run1", 1)
        rows.uncount(cur, "run1", 0)
    assert quota_used(pg, task, "run1") == 0
    assert [r.id for r in claim(pg, t, rows, "run1", "run1|0|a", 5)] == [1]
    assert claim(pg, t, rows, "no_run", "x|0|a", 5) == [], "a run without a quota row claims nothing"
    with pg.cursor() as cur:
        assert rows.counts(cur) == {"pending": 0, "claimed": 2, "done": 0, "parked": 0}
        rows.close_run(cur, "run1")
    assert quota_used(pg, task, "run1") is None


def test_every_category_takes_turns_and_a_deleted_source_row_is_claimed_without_values(pg, schema, task):
    t = tables(pg, schema, category="cat", round_robin=True)
    rows = t.rows(task)
    with pg.cursor() as cur:
        assert rows.sync(cur, t.parts(), None) == 5
        rows.rank(cur, t.parts(), None)
        rows.open_run(cur, "run1", 10)
    pg.execute(f'DELETE FROM "{schema}".src WHERE id = 5')
    claimed = claim(pg, t, rows, "run1", "run1|0|a", 5)
    assert [r.id for r in claimed] == [2, 4, 5, 1, 3], "a, b, c, then the next of a and b"
    assert claimed[2] == ClaimedRow(5, False, (None, None)), "its source row was deleted after the ranking"
    with pg.cursor() as cur:
        assert rows.rank(cur, t.parts(), None) == 3, "the gone row leaves the order, 1 and 3 move up"
        assert rows.statuses(cur, [5]) == {5: CLAIMED}


def test_outcomes_are_fenced_by_the_claim_token_and_given_back_rows_leave_the_quota(pg, schema, task):
    t = tables(pg, schema, category=None)
    rows = t.rows(task)
    with pg.cursor() as cur:
        rows.sync(cur, t.parts(), None)
        rows.rank(cur, t.parts(), None)
        rows.open_run(cur, "run1", 10)
    assert len(claim(pg, t, rows, "run1", "run1|0|a", 5)) == 5
    with pg.cursor() as cur:
        assert sorted(rows.renew(cur, [1, 2], "run1|0|a")) == [1, 2]
        assert rows.renew(cur, [1], "other|0|b") == []
        assert rows.complete(cur, [1], "other|0|b") == []
        assert rows.complete(cur, [1], "run1|0|a") == [1]
        assert rows.fail(cur, {2: "boom"}, "run1|0|a", 1) == {2: PARKED}
        assert rows.fail(cur, {3: "e"}, "run1|0|a", 5) == {3: PENDING}
        assert rows.give_back(cur, "run1", [4, 1], "run1|0|a", 30) == [4]
        assert rows.give_back(cur, "run1", [5], "other|0|b", 30) == []
    assert quota_used(pg, task, "run1") == 4
    claimed = claim(pg, t, rows, "run1", "run1|0|c", 5)
    assert [r.id for r in claimed] == [4], "given back: claimable at once; the failed row waits its retry delay"
    with pg.cursor() as cur:
        assert rows.statuses(cur, [1, 2, 3, 4, 5, 9]) == {1: DONE, 2: PARKED, 3: PENDING, 4: CLAIMED, 5: CLAIMED}
        [parked] = rows.parked(cur, 10)
        assert (parked["id"], parked["attempts"], parked["last_error"]) == (2, 1, "boom")
        assert parked["failed_at"] is not None
        assert rows.parked(cur, 0) == []
        assert rows.release_owner(cur, "run1", "run1|0") == 2
    assert quota_used(pg, task, "run1") == 3, "5 claimed, 1 given back, 1 claimed again, 2 released"
    with pg.cursor() as cur:
        assert rows.unpark(cur, [3]) == []
        assert rows.unpark(cur, None) == [2]
        assert rows.statuses(cur, [2]) == {2: PENDING}
    status = pg.execute(sql.SQL("SELECT attempts, claim_token FROM {} WHERE id = 2").format(t.status.ident)).fetchone()
    assert status == (0, None)


def test_unpark_takes_the_given_rows_only(pg, schema, task):
    t = tables(pg, schema, category=None)
    rows = t.rows(task)
    with pg.cursor() as cur:
        rows.sync(cur, t.parts(), None)
        cur.execute(sql.SQL("UPDATE {} SET status = 3 WHERE id IN (1, 2)").format(t.status.ident))
        assert rows.unpark(cur, [2, 3]) == [2]
        assert rows.statuses(cur, [1, 2]) == {1: PARKED, 2: PENDING}


@pytest.mark.parametrize("epoch", [False, True], ids=["timestamptz", "epoch"])
def test_given_back_rows_are_claimable_at_once_and_old_done_rows_of_deleted_sources_are_pruned(pg, schema, task, epoch):
    t = tables(pg, schema, category=None, epoch=epoch)
    rows = t.rows(task)
    with pg.cursor() as cur:
        rows.sync(cur, t.parts(), None)
        rows.rank(cur, t.parts(), None)
        rows.open_run(cur, "run1", 10)
    assert [r.id for r in claim(pg, t, rows, "run1", "run1|0|a", 3)] == [5, 4, 3], "by name: v, w, x"
    with pg.cursor() as cur:
        assert rows.give_back(cur, "run1", [5], "run1|0|a", LEASE[1]) == [5]
        assert rows.complete(cur, [4, 3], "run1|0|a") == [4, 3]
    assert [r.id for r in claim(pg, t, rows, "run1", "run1|0|b", 1)] == [5], "given back: past its retry delay"
    pg.execute(f'DELETE FROM "{schema}".src WHERE id = 4')
    older = sql.SQL("end_time - 200" if epoch else "end_time - interval '200 seconds'")
    pg.execute(sql.SQL("UPDATE {} SET end_time = ").format(t.status.ident) + older + sql.SQL(" WHERE status = 2"))
    prune = t.status.statement("prune_done", source=t.parts().source, source_id=t.parts().source_id)
    with pg.cursor() as cur:
        assert cur.execute(prune, {"task": task, "age_s": 300, "limit": 10}).rowcount == 0, "not old enough"
        assert cur.execute(prune, {"task": task, "age_s": 100, "limit": 10}).rowcount == 1
        assert rows.statuses(cur, [3, 4]) == {3: DONE}, "a done row whose source row exists stays"


@pytest.mark.parametrize("epoch", [False, True], ids=["timestamptz", "epoch"])
def test_a_claimed_row_is_taken_over_only_once_its_lease_lapsed(pg, schema, task, epoch):
    t = tables(pg, schema, category=None, epoch=epoch)
    pg.execute(f"INSERT INTO \"{schema}\".src VALUES (0, 'a', 'a')")
    rows = t.rows(task)
    with pg.cursor() as cur:
        rows.sync(cur, t.parts(), None)
        rows.rank(cur, t.parts(), None)
        rows.open_run(cur, "run1", 10)
    assert claim(pg, t, rows, "run1", "run1|0|a", 1) == [ClaimedRow(0, True, (0, "a"))], "source id 0 exists too"

    # An epoch table's writers may leave the end time 0 instead of NULL: empty either way.
    start = "extract(epoch from now())::bigint - %s, end_time = 0" if epoch else "now() - make_interval(secs => %s)"

    def started_ago(seconds: int) -> None:
        pg.execute(sql.SQL("UPDATE {} SET start_time = " + start + " WHERE id = 0").format(t.status.ident), (seconds,))

    started_ago(LEASE[1] + 60)  # past the retry delay, well within the lease
    assert [r.id for r in claim(pg, t, rows, "run1", "run1|0|b", 1)] == [5], "a live lease is skipped"
    started_ago(LEASE[0] + 60)
    assert [r.id for r in claim(pg, t, rows, "run1", "run1|0|b", 1)] == [0], "its lease lapsed: taken over"
    with pg.cursor() as cur:
        assert rows.renew(cur, [0], "run1|0|a") == [], "the first worker's token no longer holds it"
