"""The status-table protocol (crawler_ops.hooks.store.status_table) on PostgreSQL: claims, leases, the claim token's
fence, the owner match of a retry, failures and parking, for timestamptz and INT epoch time columns."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from crawler_ops.errors import StatusTableError
from crawler_ops.hooks.store.status_table import CLAIMED, DONE, PARKED, PENDING, StatusTable, like_prefix

pytestmark = pytest.mark.integration

TASK = "t"


def ensure(pg: psycopg.Connection[Any], schema: str, name: str = "status", create: bool = True) -> StatusTable:
    with pg.transaction(), pg.cursor() as cur:
        return StatusTable.ensure(cur, schema, name, create)


def rows(pg: psycopg.Connection[Any], table: StatusTable, *ids: int) -> None:
    for row_id in ids:
        pg.execute(
            sql.SQL("INSERT INTO {} (id, status, task_name) VALUES (%s, 0, %s)").format(table.ident), (row_id, TASK)
        )


def status(pg: psycopg.Connection[Any], table: StatusTable) -> dict[int, tuple[Any, ...]]:
    """id -> (status, attempts, last_error, claim_token, end_time is null)."""
    found = pg.execute(
        sql.SQL(
            "SELECT id, status, attempts, last_error, claim_token, end_time IS NULL FROM {} WHERE task_name = %s"
        ).format(table.ident),
        (TASK,),
    ).fetchall()
    return {int(r[0]): tuple(r[1:]) for r in found}


def age(pg: psycopg.Connection[Any], table: StatusTable, seconds: int) -> None:
    """Every row's start_time moved ``seconds`` into the past (a lease or retry delay running out)."""
    shift = sql.SQL("start_time - %s") if table.epoch_times else sql.SQL("start_time - make_interval(secs => %s)")
    pg.execute(sql.SQL("UPDATE {} SET start_time = ").format(table.ident) + shift, (seconds,))


@pytest.fixture(params=["timestamptz", "epoch"])
def table(request: pytest.FixtureRequest, pg: psycopg.Connection[Any], schema: str) -> StatusTable:
    if request.param == "epoch":
        pg.execute(
            f'CREATE TABLE "{schema}".status (id bigint, status int, start_time bigint, end_time bigint, '
            "task_name varchar(100), UNIQUE (id, task_name))"
        )
    found = ensure(pg, schema)
    assert found.epoch_times == (request.param == "epoch")
    return found


def test_a_claim_takes_pending_rows_and_not_rows_another_worker_holds(pg, table):
    rows(pg, table, 1, 2, 3)
    with pg.cursor() as cur:
        assert sorted(table.claim_ids(cur, TASK, [1, 2], "run_a|0|x", "run_a|0", 60)) == [1, 2]
        assert table.claim_ids(cur, TASK, [2, 3], "run_b|0|y", "run_b|0", 60) == [3]
        assert table.counts(cur, TASK) == {"pending": 0, "claimed": 3, "done": 0, "parked": 0}
        assert table.claim_ids(cur, "other", [1], "run_b|0|y", "run_b|0", 60) == []
    assert status(pg, table)[2][3] == "run_a|0|x"


def test_a_lapsed_lease_is_taken_over_and_the_old_holder_is_fenced_out(pg, table):
    rows(pg, table, 1)
    with pg.cursor() as cur:
        assert table.claim_ids(cur, TASK, [1], "a|0|old", "a|0", 60) == [1]
        assert table.claim_ids(cur, TASK, [1], "b|0|new", "b|0", 60) == [], "the lease still holds"
        age(pg, table, 61)
        assert table.claim_ids(cur, TASK, [1], "b|0|new", "b|0", 60) == [1], "the lease lapsed"
        assert not table.renew(cur, TASK, 1, "a|0|old")
        assert table.complete(cur, TASK, [1], "a|0|old") == []
        assert table.release(cur, TASK, 1, "a|0|old", "boom", 3) is None
        assert status(pg, table)[1][:4] == (CLAIMED, 0, None, "b|0|new")
        assert table.renew(cur, TASK, 1, "b|0|new")
        assert table.complete(cur, TASK, [1], "b|0|new") == [1]
        assert status(pg, table)[1][:4] == (DONE, 1, None, "b|0|new")
        assert not table.renew(cur, TASK, 1, "b|0|new"), "a done row has no lease to renew"
        assert table.complete(cur, TASK, [1], "b|0|new") == [], "done once"
        age(pg, table, 1000)
        assert table.claim_ids(cur, TASK, [1], "c|0|z", "c|0", 60) == [], "a done row is never claimed"


def test_a_renewal_keeps_the_lease_from_lapsing(pg, table):
    rows(pg, table, 1)
    with pg.cursor() as cur:
        table.claim_ids(cur, TASK, [1], "a|0|t", "a|0", 60)
        age(pg, table, 61)
        assert table.renew_many(cur, TASK, [1], "a|0|t") == [1]
        assert table.claim_ids(cur, TASK, [1], "b|0|u", "b|0", 60) == []


def test_a_retry_of_the_same_worker_takes_back_its_claims_but_not_those_of_workers_sharing_a_prefix(pg, table):
    """Worker ``run|1`` retried may take over what its killed try held, never the live claims of ``run|10``."""
    rows(pg, table, 1, 10, 11)
    with pg.cursor() as cur:
        table.claim_ids(cur, TASK, [1], "run|1|try1", "run|1", 600)
        table.claim_ids(cur, TASK, [10, 11], "run|10|try1", "run|10", 600)
        assert table.claim_ids(cur, TASK, [1, 10, 11], "run|1|try2", "run|1", 600) == [1]
        assert status(pg, table)[10][3] == "run|10|try1"
        assert table.release_owner(cur, TASK, "run|1") == 1
        assert status(pg, table)[1][:4] == (PENDING, 0, None, None)
        assert status(pg, table)[10][0] == CLAIMED


def test_an_owner_with_like_wildcards_matches_only_itself():
    assert like_prefix("run_1%x\\") == "run\\_1\\%x\\\\|%"


def test_a_released_row_waits_for_the_retry_delay_and_parks_at_its_last_attempt(pg, table):
    rows(pg, table, 1)
    with pg.cursor() as cur:
        table.claim_ids(cur, TASK, [1], "a|0|t", "a|0", 60)
        assert table.release(cur, TASK, 1, "a|0|t", "x" * 3000, 2) == PENDING
        assert status(pg, table)[1][:4] == (PENDING, 1, "x" * 2000, None)
        assert table.claim_ids(cur, TASK, [1], "a|0|t2", "a|0", 60, retry_s=30) == [], "within the retry delay"
        age(pg, table, 31)
        assert table.claim_ids(cur, TASK, [1], "a|0|t2", "a|0", 60, retry_s=30) == [1]
        assert table.release_many(cur, TASK, {1: "again"}, "a|0|t2", 2) == {1: PARKED}
        assert status(pg, table)[1][:3] == (PARKED, 2, "again")
        age(pg, table, 1000)
        assert table.claim_ids(cur, TASK, [1], "a|0|t3", "a|0", 60) == [], "a parked row is never claimed"
        assert table.counts(cur, TASK) == {"pending": 0, "claimed": 0, "done": 0, "parked": 1}


def test_without_max_attempts_a_failing_row_is_never_parked(pg, table):
    rows(pg, table, 1)
    with pg.cursor() as cur:
        for attempt in range(3):
            age(pg, table, 1)
            table.claim_ids(cur, TASK, [1], f"a|0|{attempt}", "a|0", 60)
            assert table.release(cur, TASK, 1, f"a|0|{attempt}", "e", None) == PENDING
        assert status(pg, table)[1][1] == 3


def test_a_claimed_row_with_an_end_time_is_not_taken_over_when_its_lease_lapses(pg, table):
    """An old executor's row marked with an end time is finished, whatever its status says."""
    rows(pg, table, 1)
    end = "extract(epoch from now())::bigint" if table.epoch_times else "now()"
    pg.execute(sql.SQL(f"UPDATE {{}} SET status = 1, start_time = {end}, end_time = {end}").format(table.ident))
    age(pg, table, 1000)
    with pg.cursor() as cur:
        assert table.claim_ids(cur, TASK, [1], "b|0|u", "b|0", 60) == []


def test_counts_name_an_unknown_status(pg, table):
    rows(pg, table, 1)
    pg.execute(sql.SQL("UPDATE {} SET status = 7").format(table.ident))
    with pg.cursor() as cur:
        assert table.counts(cur, TASK) == {"pending": 0, "claimed": 0, "done": 0, "parked": 0, "status_7": 1}


def test_ensure_creates_upgrades_and_checks_a_table(pg, schema):
    with pytest.raises(StatusTableError, match="does not exist and creation is off"):
        ensure(pg, schema, "absent", create=False)
    pg.execute(f'CREATE TABLE "{schema}".old (id int, status int, start_time int, end_time int, task_name text)')
    with pytest.raises(StatusTableError, match=r"needs a unique constraint on \(id, task_name\)"):
        ensure(pg, schema, "old")
    pg.execute(f'ALTER TABLE "{schema}".old ADD UNIQUE (id, task_name)')
    table = ensure(pg, schema, "old")
    assert (table.label, table.epoch_times) == (f"{schema}.old", True)
    columns = {
        r[0]
        for r in pg.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'old'",
            (schema,),
        ).fetchall()
    }
    assert {"attempts", "last_error", "claim_token", "seq"} <= columns
    index = pg.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,)).fetchall()
    assert ("old_open_idx",) in index
    pg.execute(f'CREATE TABLE "{schema}".bad (id int, status int, task_name text)')
    with pytest.raises(
        StatusTableError,
        match=r"lacks the columns \['end_time', 'start_time'\] of the "
        r"\(id, status, start_time, end_time, task_name\) layout$",
    ):
        ensure(pg, schema, "bad")
    created = ensure(pg, schema, "new")
    assert not created.epoch_times
    with pg.cursor() as cur:
        assert StatusTable.inspect(cur, schema, "new") == created
        assert StatusTable.inspect(cur, schema, "none") is None
