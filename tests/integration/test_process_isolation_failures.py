"""``isolation: process`` when the child fails, on a real PostgreSQL: a child that exits in the middle of a call,
a function whose module does not import in the child, and one that stops importing while the executor runs. The
row in the call is never done, its error names it and the cause, no claim is left behind, and the other rows run
as the protocol says."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler_ops.errors import ConfigError
from crawler_ops.executor import run_worker, sync_rows
from crawler_ops.hooks.store.status_table import CLAIMED, DONE, PARKED, PENDING
from tests.integration.executor_crash_functions import BROKEN_MESSAGE, EXIT_CODE
from tests.integration.executor_lease_support import calls, executor, make_source
from tests.support import query

pytestmark = pytest.mark.integration

CRASH = "tests.integration.executor_crash_functions"


def status_rows(pg_uri: str, schema: str, task: str) -> dict[int, tuple[int, int, str | None, str | None]]:
    """Row id -> (status, attempts, last error, claim token)."""
    found = query(
        pg_uri,
        f'SELECT id, status, attempts, last_error, claim_token FROM "{schema}".status_table WHERE task_name = %s',
        task,
    )
    return {int(i): (int(status), int(attempts), error, token) for i, status, attempts, error, token in found}


def test_a_child_that_exits_mid_call_fails_its_row_by_name_and_a_new_child_runs_the_next_rows(
    pg_schema, pg_uri, unique_id
):
    make_source(pg_uri, pg_schema, ["A"] * 5)
    cfg = executor(pg_schema, unique_id, isolation="process", function=f"{CRASH}.exit_on_row_two", max_attempts=1)
    sync_rows(cfg)

    result = run_worker(cfg, "run-1", 0)

    assert (result["done"], result["parked"], result["failed"]) == (4, 1, 0), result
    found = status_rows(pg_uri, pg_schema, unique_id)
    status, attempts, error, token = found[2]
    assert (status, attempts, token) == (PARKED, 1, None), "row 2 is not done, and its claim is not held"
    assert error is not None and "row 2" in error and f"exit code {EXIT_CODE}" in error, error
    assert {i: found[i][0] for i in (1, 3, 4, 5)} == dict.fromkeys((1, 3, 4, 5), DONE)
    assert all(status != CLAIMED for status, *_ in found.values()), "no claim left behind"
    logged = calls(pg_uri, pg_schema)
    assert [row for row, *_ in logged] == [1, 2, 3, 4, 5], "each row called once, in order"
    pids = {row: pid for row, pid, *_ in logged}
    assert pids[1] == pids[2] and len({pids[2], pids[3]}) == 2, "a new child after the one that exited"
    assert pids[3] == pids[4] == pids[5]


def test_a_function_whose_module_does_not_import_in_the_child_fails_the_worker_and_claims_nothing(
    pg_schema, pg_uri, unique_id, tmp_path, monkeypatch
):
    make_source(pg_uri, pg_schema, ["A"] * 3)
    cfg = executor(
        pg_schema, unique_id, isolation="process", function="tests.integration.executor_missing_dependency.call"
    )
    sync_rows(cfg)

    with pytest.raises(ConfigError) as failed:
        run_worker(cfg, "run-1", 0)

    message = str(failed.value)
    assert f"executor '{unique_id}'" in message and "cannot be imported" in message
    assert "ModuleNotFoundError" in message and "crawler_ops_test_dependency" in message, message
    assert status_rows(pg_uri, pg_schema, unique_id) == dict.fromkeys((1, 2, 3), (PENDING, 0, None, None))

    # Once the dependency is installed, the next run does every row.
    (tmp_path / "crawler_ops_test_dependency.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_worker(cfg, "run-2", 0)["done"] == 3
    assert {i: s for i, (s, *_) in status_rows(pg_uri, pg_schema, unique_id).items()} == dict.fromkeys((1, 2, 3), DONE)


def test_a_module_that_stops_importing_mid_run_fails_each_next_row_with_the_import_error(
    pg_schema, pg_uri, unique_id, tmp_path, monkeypatch
):
    marker = tmp_path / "broken"
    monkeypatch.setenv("CRAWLER_OPS_TEST_BREAK_ON_EXIT", str(marker))
    make_source(pg_uri, pg_schema, ["A"] * 4)
    function = "tests.integration.executor_breakable.exit_on_row_two"
    cfg = executor(pg_schema, unique_id, isolation="process", function=function, max_attempts=3, row_retry_delay_s=3600)
    sync_rows(cfg)

    result = run_worker(cfg, "run-1", 0)

    assert Path(marker).exists(), "row 2's call broke the module and exited"
    assert (result["done"], result["failed"], result["parked"]) == (1, 3, 0), result
    found = status_rows(pg_uri, pg_schema, unique_id)
    assert found[1][0] == DONE
    assert "row 2" in (found[2][2] or "") and f"exit code {EXIT_CODE}" in (found[2][2] or ""), found[2]
    for row in (3, 4):
        status, attempts, error, token = found[row]
        assert (status, attempts, token) == (PENDING, 1, None), found[row]
        assert error is not None and f"row {row}" in error and function in error and BROKEN_MESSAGE in error, error
    assert [row for row, *_ in calls(pg_uri, pg_schema)] == [1, 2], "rows 3 and 4 never reached the function"
