"""What the old executor could do, on a real PostgreSQL: old functions unchanged (``function_style: legacy``),
every category in one run (``category: "*"``), parked rows in the status view and back to pending from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from crawler_ops.executor import run_worker, sync_rows
from tests.integration.executor_lease_support import FUNCTIONS, REPO, calls, executor, make_source, rows
from tests.support import query

pytestmark = pytest.mark.integration


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-m", "crawler_ops", *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_the_old_sample_function_runs_unchanged_in_the_legacy_style(pg_schema, pg_uri, unique_id, capfd, isolation):
    make_source(pg_uri, pg_schema, ["A"] * 3)
    cfg = executor(
        pg_schema,
        unique_id,
        function=f"{FUNCTIONS}.udf",
        function_style="legacy",
        output_fields=["ID", "PROVINCE"],
        isolation=isolation,
    )
    sync_rows(cfg)

    assert run_worker(cfg, "run-1", 0)["done"] == 3

    printed = capfd.readouterr().out
    assert "[(1, '省1')]" in printed and "[(3, '省3')]" in printed, "data as the old job passed it"
    assert {status for status, _ in rows(pg_uri, pg_schema, unique_id).values()} == {2}


def test_an_old_function_reporting_a_false_status_fails_its_row(pg_schema, pg_uri, unique_id):
    make_source(pg_uri, pg_schema, ["A"] * 10)
    cfg = executor(pg_schema, unique_id, function=f"{FUNCTIONS}.logged_old_udf", function_style="legacy")
    sync_rows(cfg)

    result = run_worker(cfg, "run-1", 0)

    assert (result["done"], result["failed"]) == (8, 2)
    failed = query(pg_uri, f'SELECT id, last_error FROM "{pg_schema}".status_table WHERE status = 0 ORDER BY id')
    assert failed == [(5, "function returned (5, 0)"), (10, "function returned (10, 0)")]


def test_every_category_takes_turns_in_one_run(pg_schema, pg_uri, unique_id):
    # ids 1..9: A B A C B A A B A
    make_source(pg_uri, pg_schema, ["A", "B", "A", "C", "B", "A", "A", "B", "A"])
    cfg = executor(pg_schema, unique_id, category="*", sort_fields=["city"], claim_batch=2)

    assert sync_rows(cfg)["inserted"] == 9
    assert run_worker(cfg, "run-1", 0)["done"] == 9

    order = [row_id for row_id, _, _, _ in calls(pg_uri, pg_schema)]
    # Within a category by city ('市1' < '市3' < '市6' < '市7' < '市9' as text), then the categories in turn.
    assert order == [1, 2, 4, 3, 5, 6, 8, 7, 9]


def test_parked_rows_show_in_the_status_view_and_the_cli_puts_them_back(pg_schema, pg_uri, unique_id, use_config):
    make_source(pg_uri, pg_schema, ["A"] * 4)
    cfg = executor(pg_schema, unique_id, function=f"{FUNCTIONS}.fail_always", max_attempts=1)
    sync_rows(cfg)
    assert run_worker(cfg, "run-1", 0)["parked"] == 4
    use_config(cfg, "executors")

    view = cli("status", "--executor", unique_id, "--json")
    text = cli("status", "--executor", unique_id)

    assert view.returncode == 0, view.stderr
    (row,) = json.loads(view.stdout)["executors"]
    assert row["rows"] == {"pending": 0, "claimed": 0, "done": 0, "parked": 4}
    assert sorted(p["id"] for p in row["parked"]) == [1, 2, 3, 4]
    assert {p["last_error"] for p in row["parked"]} == {f"RuntimeError: row {i} cannot be handled" for i in range(1, 5)}
    assert "parked row 3 after 1 attempts" in text.stdout and "RuntimeError: row 3 cannot be handled" in text.stdout

    one = cli("unpark", "--executor", unique_id, "--id", "2")
    assert one.returncode == 0, one.stderr
    assert rows(pg_uri, pg_schema, unique_id)[2][0] == 0
    assert query(pg_uri, f'SELECT attempts FROM "{pg_schema}".status_table WHERE id = 2') == [(0,)]

    mixed = cli("unpark", "--executor", unique_id, "--id", "2", "3", "99")
    assert mixed.returncode == 1
    assert "row 2 is not parked (pending)" in mixed.stderr and "row 99 is not parked (missing)" in mixed.stderr
    assert "1 rows back to pending: 3" in mixed.stdout

    rest = cli("unpark", "--executor", unique_id)
    assert rest.returncode == 0 and "2 rows back to pending: 1, 4" in rest.stdout
    assert {status for status, _ in rows(pg_uri, pg_schema, unique_id).values()} == {0}

    unknown = cli("unpark", "--executor", "no_such_executor")
    assert unknown.returncode == 2 and "no executor 'no_such_executor'" in unknown.stderr
