"""Executor leases and quotas on a real PostgreSQL: a function slower than the lease runs once per row, rows
waiting behind a slow call go to other workers, a killed worker's row is re-run only after its lease lapses
(and its late completion is fenced), a run never exceeds cycle_index over all its workers, and a call past
its timeout is killed under ``isolation: process``."""

from __future__ import annotations

import os
import signal
from collections import Counter
from datetime import timedelta

import psycopg
import pytest

from crawler_ops.executor import run_worker, summarize, sync_rows
from crawler_ops.executor.tables import resolve_tables
from crawler_ops.factory.executor import build_executor_dag
from tests.integration.executor_lease_support import (
    call_counts,
    calls,
    executor,
    lapsed,
    lease_start,
    make_source,
    process_gone,
    rows,
    run_together,
    spawn,
    wait_for,
)
from tests.support import query, runner_result

pytestmark = pytest.mark.integration


def test_a_function_slower_than_the_lease_runs_once_per_row_with_three_workers(pg_schema, pg_uri, unique_id, tmp_path):
    make_source(pg_uri, pg_schema, ["A"] * 6)
    cfg = executor(pg_schema, unique_id, period=3, workers=3)
    sync_rows(cfg)

    results = run_together(cfg, "run-1", 3, tmp_path, EXECUTOR_TEST_SLEEPS="*=4.5")

    assert call_counts(pg_uri, pg_schema) == {i: 1 for i in range(1, 7)}, "each row called exactly once"
    assert sum(r["done"] for r in results) == 6 and sum(r["fenced"] for r in results) == 0
    assert len({pid for _, pid, _, _ in calls(pg_uri, pg_schema)}) > 1, "the rows were shared between workers"
    assert {status for status, _ in rows(pg_uri, pg_schema, unique_id).values()} == {2}


def test_rows_waiting_behind_a_slow_call_are_given_back_and_run_by_another_worker(pg_schema, pg_uri, unique_id):
    make_source(pg_uri, pg_schema, ["A"] * 40)
    cfg = executor(pg_schema, unique_id, period=4, claim_batch=8)
    sync_rows(cfg)
    slow = spawn(cfg, "run-A", 0, EXECUTOR_TEST_SLEEPS="10=9")
    wait_for(lambda: 10 in call_counts(pg_uri, pg_schema), 120, "the slow call on row 10")

    def waiting() -> list[int]:
        claimed = [i for i, (status, _) in rows(pg_uri, pg_schema, unique_id).items() if status == 1]
        return sorted(set(claimed) - set(call_counts(pg_uri, pg_schema)))

    held = wait_for(waiting, 3, "rows claimed, not started, behind the slow call")

    others = set(range(1, 41)) - {10}

    def all_but_the_slow_row_done() -> bool:
        run_worker(cfg, "run-B", 0)  # this process: no slow row
        return {i for i, (status, _) in rows(pg_uri, pg_schema, unique_id).items() if status == 2} == others

    wait_for(all_but_the_slow_row_done, 120, "every row but the slow one done by another worker")
    slow_call = [c for c in calls(pg_uri, pg_schema) if c[0] == 10]
    assert slow_call[0][3] is None, "the held rows were done by another worker while the slow call still ran"

    result = runner_result(slow, timeout=60)
    assert result["given_back"] >= len(held) and result["fenced"] == 0, result
    assert call_counts(pg_uri, pg_schema) == {i: 1 for i in range(1, 41)}, "each row called exactly once"
    pids = {i: pid for i, pid, _, _ in calls(pg_uri, pg_schema)}
    assert pids[10] == slow.pid and all(pids[i] == os.getpid() for i in held)


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_killed_worker_keeps_its_row_until_the_lease_lapses_then_it_runs_again_and_the_late_outcome_is_fenced(
    pg_schema, pg_uri, unique_id, isolation
):
    make_source(pg_uri, pg_schema, ["A"] * 3)
    cfg = executor(pg_schema, unique_id, period=3, isolation=isolation)
    sync_rows(cfg)
    worker = spawn(cfg, "run-1", 0, EXECUTOR_TEST_SLEEPS="*=60")
    ((row_id, caller_pid, _, _),) = wait_for(lambda: calls(pg_uri, pg_schema), 120, "the first call")
    old_token = rows(pg_uri, pg_schema, unique_id)[row_id][1]
    first_lease = lease_start(pg_uri, pg_schema, unique_id, row_id)

    # Past the lease the row was first claimed with, only renewal keeps it.
    wait_for(lambda: lapsed(pg_uri, first_lease, cfg.period), 60, "the row's first lease to lapse")
    assert run_worker(cfg, "run-2", 0)["done"] == 2, "the other rows, not the one in progress"
    assert rows(pg_uri, pg_schema, unique_id)[row_id] == (1, old_token)
    assert lease_start(pg_uri, pg_schema, unique_id, row_id) > first_lease, "renewed by its worker"

    worker.send_signal(signal.SIGKILL)
    worker.wait()
    wait_for(lambda: process_gone(caller_pid), 30, "the call to stop with its worker")
    last_lease = lease_start(pg_uri, pg_schema, unique_id, row_id)

    def run_again() -> bool:
        run_worker(cfg, "run-3", 0)
        return rows(pg_uri, pg_schema, unique_id)[row_id][0] == 2

    wait_for(run_again, 60, "the killed worker's row to run again")

    assert row_id == 1 and call_counts(pg_uri, pg_schema) == {1: 2, 2: 1, 3: 1}
    second_call = [started for i, _, started, _ in calls(pg_uri, pg_schema) if i == row_id][1]
    assert second_call >= last_lease + timedelta(seconds=cfg.period), "not before the lease lapsed"
    with psycopg.connect(pg_uri) as conn, conn.cursor() as cur:
        late = resolve_tables(cur, cfg).rows(unique_id)
        assert late.complete(cur, [row_id], old_token) == []
        assert late.fail(cur, {row_id: "late failure"}, old_token, 3) == {}
    status, token = rows(pg_uri, pg_schema, unique_id)[row_id]
    assert status == 2 and token != old_token


@pytest.mark.parametrize(
    ("available", "cycle_index", "workers"),
    [(100, 10, 4), (20, 1, 3)],
    ids=["10-rows-4-workers", "1-row-3-workers"],
)
def test_a_run_processes_at_most_cycle_index_rows_over_all_its_workers(
    pg_schema, pg_uri, unique_id, tmp_path, available, cycle_index, workers
):
    make_source(pg_uri, pg_schema, ["A"] * available)
    cfg = executor(pg_schema, unique_id, cycle_index=cycle_index, workers=workers)
    sync_rows(cfg)

    results = run_together(cfg, "run-1", workers, tmp_path, EXECUTOR_TEST_SLEEPS="*=0.2")

    assert sum(r["done"] for r in results) == cycle_index
    assert sum(call_counts(pg_uri, pg_schema).values()) == cycle_index
    assert Counter(status for status, _ in rows(pg_uri, pg_schema, unique_id).values()) == {
        2: cycle_index,
        0: available - cycle_index,
    }
    summarize(cfg, "run-1", results)
    assert query(pg_uri, "SELECT count(*) FROM crawler_ops.executor_run WHERE task_name = %s", unique_id) == [(0,)]


def test_rows_given_back_unstarted_no_longer_count_against_the_run_quota(pg_schema, pg_uri, unique_id):
    make_source(pg_uri, pg_schema, ["A"] * 30)
    cfg = executor(pg_schema, unique_id, cycle_index=10)
    sync_rows(cfg)
    with psycopg.connect(pg_uri, autocommit=True) as conn, conn.cursor() as cur:
        tables = resolve_tables(cur, cfg)
        queue, parts = tables.rows(unique_id), tables.parts()
        queue.open_run(cur, "run-1", 10)

        def claim(token: str, limit: int) -> list[int]:
            return [row.id for row in queue.claim(cur, parts, "run-1", token, limit, (600, 300))]

        assert claim("run-1|w0|a", 4) == [1, 2, 3, 4]
        assert claim("run-1|w1|b", 100) == [5, 6, 7, 8, 9, 10], "the quota's remaining 6"
        assert claim("run-1|w2|c", 100) == []
        assert queue.give_back(cur, "run-1", [9, 10], "run-1|w1|b", 300) == [9, 10]
        assert queue.give_back(cur, "run-1", [1], "run-1|w1|b", 300) == [], "fenced: row 1 is w0's"
        assert claim("run-1|w2|c", 100) == [9, 10]


def test_a_retried_worker_takes_back_at_once_what_its_earlier_try_held(pg_schema, pg_uri, unique_id):
    make_source(pg_uri, pg_schema, ["A"] * 3)
    cfg = executor(pg_schema, unique_id)
    sync_rows(cfg)
    with psycopg.connect(pg_uri, autocommit=True) as conn, conn.cursor() as cur:
        tables = resolve_tables(cur, cfg)
        earlier = tables.rows(unique_id)
        earlier.open_run(cur, "run-1", cfg.cycle_index)
        assert [r.id for r in earlier.claim(cur, tables.parts(), "run-1", "run-1|w0|gone", 2, (600, 300))] == [1, 2]

    assert run_worker(cfg, "run-1", 1)["done"] == 1, "another worker leaves the held rows to their lease"
    assert run_worker(cfg, "run-1", 0)["done"] == 2, "the same worker's next try takes them back at once"
    assert call_counts(pg_uri, pg_schema) == {1: 1, 2: 1, 3: 1}


def test_a_call_past_its_timeout_is_killed_with_isolation_process(pg_schema, pg_uri, unique_id):
    make_source(pg_uri, pg_schema, ["A"] * 2)
    cfg = executor(pg_schema, unique_id, isolation="process", timeout_s=2, max_attempts=1)
    sync_rows(cfg)
    worker = spawn(cfg, "run-1", 0, EXECUTOR_TEST_SLEEPS="1=30,2=1")

    stuck, second = wait_for(lambda: len(found := calls(pg_uri, pg_schema)) == 2 and found, 120, "the second call")
    assert process_gone(stuck[1]), "the timed-out call was killed before the next call started"
    result = runner_result(worker, timeout=60)
    assert (result["done"], result["parked"]) == (1, 1)

    stuck, second = calls(pg_uri, pg_schema)
    assert (stuck[0], second[0]) == (1, 2) and stuck[3] is None and second[3] is not None
    assert len({worker.pid, stuck[1], second[1]}) == 3, "each call in a child; a new child after the kill"
    error = query(pg_uri, f'SELECT status, last_error FROM "{pg_schema}".status_table WHERE id = 1')
    assert error == [(3, "timed out after 2s")]


def test_the_executor_dag_keeps_to_cycle_index_over_its_mapped_workers(pg_schema, pg_uri, unique_id, use_config):
    make_source(pg_uri, pg_schema, ["A"] * 50)
    cfg = executor(pg_schema, unique_id, cycle_index=10, workers=4)
    use_config(cfg, "executors")

    dagrun = build_executor_dag(cfg).test(run_conf={})

    assert str(dagrun.state) == "success"
    assert Counter(status for status, _ in rows(pg_uri, pg_schema, unique_id).values()) == {2: 10, 0: 40}
    assert sum(call_counts(pg_uri, pg_schema).values()) == 10
