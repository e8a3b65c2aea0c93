"""Executor DAGs on a real PostgreSQL: exactly-once processing, failures and parking, leases and fencing,
category and order, bad config, and the old INT-epoch layout."""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg
import pytest

from crawler_ops.config import ExecutorTaskConfig, parse_config
from crawler_ops.errors import ConfigError
from crawler_ops.executor import run_worker, sync_rows
from crawler_ops.hooks.store.status_table import StatusTable
from tests.integration import executor_functions
from tests.integration import executor_lease_support as lease_support
from tests.support import query, runner_result

pytestmark = pytest.mark.integration

FUNCTIONS = "tests.integration.executor_functions"
OLD_STATUS_DDL = """
CREATE TABLE {table} (
    ID INT NOT NULL,
    STATUS INT NOT NULL,
    START_TIME INT NOT NULL,
    END_TIME INT,
    TASK_NAME VARCHAR(50) NOT NULL,
    unique(ID, TASK_NAME)
)
"""


@pytest.fixture
def schema(pg_schema: str, pg_uri: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A schema with SOURCE_DATA_TABLE (old layout, unquoted upper case) and a calls log."""
    monkeypatch.setenv("CRAWLER_OPS_TEST_SCHEMA", pg_schema)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE "{pg_schema}".SOURCE_DATA_TABLE (ID INT PRIMARY KEY, CATEGORY VARCHAR(50), '
            "PROVINCE VARCHAR(50) NOT NULL, CITY VARCHAR(50), DISTRICT VARCHAR(50))"
        )
        conn.execute(f'CREATE TABLE "{pg_schema}".calls (n bigserial PRIMARY KEY, id int NOT NULL, pid int NOT NULL)')
    return pg_schema


def add_rows(pg_uri: str, schema: str, count: int, categories: tuple[str, ...] = ("北京市",)) -> None:
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".source_data_table (id, category, province, city, district) '
            "SELECT i, (%s::text[])[1 + i %% cardinality(%s::text[])], "
            "'省' || lpad(((i * 7919) %% 97)::text, 2, '0'), '市' || i %% 13, '区' || i "
            "FROM generate_series(1, %s) AS i",
            (list(categories), list(categories), count),
        )


def executor(schema: str, name: str, **overrides: Any) -> ExecutorTaskConfig:
    return lease_support.executor(schema, name, **{"function": f"{FUNCTIONS}.record_call", **overrides})


def statuses(pg_uri: str, schema: str, task: str) -> dict[int, int]:
    rows = query(pg_uri, f'SELECT status, count(*) FROM "{schema}".status_table WHERE task_name = %s GROUP BY 1', task)
    return dict(rows)


def age_claims(pg_uri: str, schema: str, task: str, seconds: int, where: str = "TRUE") -> list[int]:
    """Move the start times of ``task``'s rows ``seconds`` into the past, as if that much time had passed since they
    were claimed or failed (leases and retry delays count from start_time, on the database's clock)."""
    rows = query(
        pg_uri,
        f'UPDATE "{schema}".status_table SET start_time = start_time - make_interval(secs => %s) '
        f"WHERE task_name = %s AND ({where}) RETURNING id",
        seconds,
        task,
    )
    return sorted(row[0] for row in rows)


def test_four_concurrent_workers_process_every_row_exactly_once(schema, pg_uri, unique_id):
    add_rows(pg_uri, schema, 10_000)
    cfg = executor(schema, unique_id, workers=4, cycle_index=10_000, claim_batch=50)
    assert sync_rows(cfg)["inserted"] == 10_000

    workers = [lease_support.spawn(cfg, "run-1", index) for index in range(4)]
    results = [runner_result(w) for w in workers]

    assert sum(r["done"] for r in results) == 10_000
    calls = query(pg_uri, f'SELECT count(*), count(DISTINCT id), count(DISTINCT pid) FROM "{schema}".calls')[0]
    assert calls[:2] == (10_000, 10_000), "every row called exactly once"
    assert calls[2] > 1, "the work was shared between processes"
    assert statuses(pg_uri, schema, unique_id) == {2: 10_000}


def test_failing_rows_return_to_pending_with_the_error_then_park(schema, pg_uri, unique_id):
    add_rows(pg_uri, schema, 100)
    cfg = executor(schema, unique_id, function=f"{FUNCTIONS}.fail_every_tenth", max_attempts=2, row_retry_delay_s=600)
    sync_rows(cfg)

    first = run_worker(cfg, "run-1", 0)

    assert (first["claimed"], first["done"], first["failed"], first["parked"]) == (100, 90, 10, 0)
    failed = query(
        pg_uri,
        f'SELECT id, status, attempts, last_error FROM "{schema}".status_table '
        "WHERE task_name = %s AND status <> 2 ORDER BY id",
        unique_id,
    )
    assert [row[0] for row in failed] == list(range(10, 101, 10))
    assert all(row[1:3] == (0, 1) and row[3] == f"ValueError: cannot handle row {row[0]}" for row in failed)
    assert run_worker(cfg, "run-2", 0)["claimed"] == 0, "a failed row waits row_retry_delay_s before a retry"

    assert age_claims(pg_uri, schema, unique_id, 601, "status = 0") == list(range(10, 101, 10))
    third = run_worker(cfg, "run-3", 0)
    assert (third["claimed"], third["parked"]) == (10, 10)
    assert statuses(pg_uri, schema, unique_id) == {2: 90, 3: 10}
    age_claims(pg_uri, schema, unique_id, 601)
    assert run_worker(cfg, "run-4", 0)["claimed"] == 0, "parked rows do not loop forever"


def test_old_contract_false_status_is_a_failure(schema, pg_uri, unique_id):
    add_rows(pg_uri, schema, 20)
    cfg = executor(schema, unique_id, function=f"{FUNCTIONS}.refuse_odd")
    sync_rows(cfg)

    result = run_worker(cfg, "run-1", 0)

    assert (result["done"], result["failed"]) == (10, 10)
    failed = query(pg_uri, f'SELECT id, last_error FROM "{schema}".status_table WHERE status = 0 ORDER BY id')
    assert failed == [(i, f"function returned ({i}, 0)") for i in range(1, 21, 2)]


def test_a_killed_worker_lease_expires_and_its_late_completion_is_fenced(schema, pg_uri, unique_id):
    add_rows(pg_uri, schema, 5)
    cfg = executor(schema, unique_id, period=600, claim_batch=1, function=f"{FUNCTIONS}.sleep_then_succeed")
    sync_rows(cfg)
    worker = lease_support.spawn(cfg, "run-1", 0, EXECUTOR_TEST_SLEEP_S="600")
    deadline = time.monotonic() + 120
    claimed: list[tuple[Any, ...]] = []
    while not claimed:
        assert time.monotonic() < deadline and worker.poll() is None, "the worker never claimed a row"
        claimed = query(pg_uri, f'SELECT id, claim_token FROM "{schema}".status_table WHERE status = 1')
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert len(claimed) == 1, claimed
    ((row_id, old_token),) = claimed

    fast = cfg.model_copy(update={"function": f"{FUNCTIONS}.record_call"})
    assert run_worker(fast, "run-2", 0)["done"] == 4, "the leased row is not taken before its lease expires"
    assert query(pg_uri, f'SELECT status FROM "{schema}".status_table WHERE id = %s', row_id) == [(1,)]
    assert age_claims(pg_uri, schema, unique_id, 601, "status = 1") == [row_id]
    assert run_worker(fast, "run-3", 0)["done"] == 1, "after the period another worker reclaims it"

    table = StatusTable(schema, "status_table")
    with psycopg.connect(pg_uri) as conn, conn.cursor() as cur:
        assert table.complete(cur, unique_id, [row_id], old_token) == []
        assert table.release(cur, unique_id, row_id, old_token, "late failure", 3) is None
    row = query(pg_uri, f'SELECT status, claim_token, last_error FROM "{schema}".status_table WHERE id = %s', row_id)
    assert row[0][0] == 2 and row[0][1] != old_token and row[0][2] is None


def test_a_call_that_outlives_timeout_s_fails_its_row_and_the_worker_goes_on(schema, pg_uri, unique_id):
    add_rows(pg_uri, schema, 5)
    cfg = executor(schema, unique_id, function=f"{FUNCTIONS}.hang_on_row_two", timeout_s=0.5, claim_batch=5)
    sync_rows(cfg)
    try:
        result = run_worker(cfg, "run-1", 0)

        assert (result["done"], result["failed"]) == (4, 1)
        rows = query(pg_uri, f'SELECT id, status, attempts, last_error FROM "{schema}".status_table ORDER BY id')
        assert rows == [
            (1, 2, 1, None),
            (2, 0, 1, "timed out after 0.5s"),
            (3, 2, 1, None),
            (4, 2, 1, None),
            (5, 2, 1, None),
        ]
        assert [r[0] for r in query(pg_uri, f'SELECT id FROM "{schema}".calls ORDER BY n')] == [1, 3, 4, 5]
    finally:
        executor_functions.RELEASE.set()


def test_a_function_that_cannot_be_imported_fails_the_worker_before_it_claims_a_row(schema, pg_uri, unique_id):
    add_rows(pg_uri, schema, 5)
    cfg = executor(schema, unique_id, function=f"{FUNCTIONS}.no_such_function")
    sync_rows(cfg)

    with pytest.raises(ConfigError, match=rf"function '{FUNCTIONS}.no_such_function' cannot be imported"):
        run_worker(cfg, "run-1", 0)
    assert statuses(pg_uri, schema, unique_id) == {0: 5}


def test_with_create_status_table_false_a_missing_status_table_is_an_error_and_an_existing_one_is_used(
    schema, pg_uri, unique_id
):
    add_rows(pg_uri, schema, 5)
    cfg = executor(schema, unique_id, create_status_table=False)

    with pytest.raises(
        ConfigError, match=rf"executor '{unique_id}': status_table '{schema}.status_table' does not exist"
    ):
        sync_rows(cfg)
    assert query(pg_uri, "SELECT to_regclass(%s)::text", f"{schema}.status_table") == [(None,)], "nothing created"

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(OLD_STATUS_DDL.format(table=f'"{schema}".status_table'))
    assert sync_rows(cfg)["inserted"] == 5
    assert run_worker(cfg, "run-1", 0)["done"] == 5
    assert statuses(pg_uri, schema, unique_id) == {2: 5}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"source_table": "{schema}.no_such_table"}, "source_table '{schema}.no_such_table' does not exist"),
        ({"output_fields": ["id", "zipcode"]}, "output_fields names column 'zipcode'"),
        ({"sort_fields": ["altitude"]}, "sort_fields names column 'altitude'"),
        ({"category": "A", "category_field": "kind"}, "category_field names column 'kind'"),
    ],
    ids=["unknown-table", "unknown-output-column", "unknown-sort-column", "unknown-category-column"],
)
def test_unknown_tables_and_columns_fail_clearly_and_create_nothing(schema, pg_uri, unique_id, overrides, message):
    add_rows(pg_uri, schema, 10)
    overrides = {k: v.format(schema=schema) if isinstance(v, str) else v for k, v in overrides.items()}
    cfg = executor(schema, unique_id, **overrides)

    with pytest.raises(ConfigError, match=f"executor '{unique_id}': " + message.format(schema=schema)):
        sync_rows(cfg)
    assert query(pg_uri, "SELECT to_regclass(%s)", f"{schema}.status_table") == [(None,)]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("source_table", "source_data_table; DROP TABLE calls"),
        ("status_table", 'status"; --'),
        ("output_fields", ["id", "province) FROM pg_user --"]),
        ("sort_fields", ["1; SELECT pg_sleep(10)"]),
    ],
    ids=["table-with-statement", "quote-in-name", "column-with-sql", "sort-with-sql"],
)
def test_sql_in_a_configured_name_is_rejected_before_anything_runs(schema, field, value):
    entry = executor(schema, "x").model_dump(mode="json") | {field: value}

    loaded = parse_config({"executors": [entry]}, "tasks.yaml")

    assert loaded.executors == ()
    assert f"executor 'x': field '{field}" in loaded.executor_errors["x"]


def test_output_fields_without_id_are_rejected():
    entry = {"name": "x", "source_table": "t", "status_table": "s", "output_fields": ["province"], "function": "a.b"}

    loaded = parse_config({"executors": [entry]}, "tasks.yaml")

    assert "output_fields must include 'id'" in loaded.executor_errors["x"]


def test_the_old_int_epoch_layout_keeps_working(schema, pg_uri, unique_id):
    add_rows(pg_uri, schema, 50)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(OLD_STATUS_DDL.format(table=f'"{schema}".status_table'))
        # What the old update_basic_data left: pending rows with epoch start times and end_time 0, plus a
        # row claimed long ago by a worker that died (status 1, expired lease, end_time 0).
        conn.execute(
            f'INSERT INTO "{schema}".status_table SELECT i, CASE WHEN i = 1 THEN 1 ELSE 0 END, '
            "extract(epoch from now())::int - 86400, 0, %s FROM generate_series(1, 20) AS i",
            (unique_id,),
        )
    cfg = executor(schema, unique_id, period=60)

    assert sync_rows(cfg)["inserted"] == 30
    assert run_worker(cfg, "run-1", 0)["done"] == 50

    rows = query(pg_uri, f'SELECT status, start_time, end_time, attempts FROM "{schema}".status_table')
    now = int(time.time())
    assert all(
        status == 2 and abs(start - now) < 300 and abs(end - now) < 300 and attempts == 1
        for status, start, end, attempts in rows
    )


def test_executor_dag_runs_sync_workers_and_summary(schema, pg_uri, unique_id, use_config):
    from crawler_ops.factory.executor import build_executor_dag

    add_rows(pg_uri, schema, 1_000, categories=("A", "B"))
    cfg = executor(schema, unique_id, category="A", workers=3, cycle_index=300)
    use_config(cfg, "executors")

    dagrun = build_executor_dag(cfg).test(run_conf={})

    assert str(dagrun.state) == "success"
    assert statuses(pg_uri, schema, unique_id) == {0: 200, 2: 300}
    assert query(pg_uri, f'SELECT count(DISTINCT id) FROM "{schema}".calls') == [(300,)]
