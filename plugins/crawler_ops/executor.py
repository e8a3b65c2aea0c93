"""Executor DAGs: a user function over the rows of a source table, driven by a status table.

Steps of a run of ``exec_<name>``:

- :func:`sync_rows` checks the configured tables and columns against the catalog, creates or upgrades
  the status table, and adds the source ids it has not seen (for the category) in one set-wise INSERT;
- :class:`ExecutorWorker` (one mapped instance per worker) claims rows of its own task in the configured
  order (``FOR UPDATE SKIP LOCKED``), calls the user function with the output fields, and records the
  outcome: done (2), or pending again (0) with the error and attempt count, parked (3) at ``max_attempts``;
- :func:`summarize` gives back claims the run's workers left and counts rows per status.

The user function contract: ``function(row: dict) -> Any`` where ``row`` maps each configured output
field name to its value. Returning normally is success, except ``False`` (or an
``(id, status)`` tuple with a false status), which is a failure; raising is a failure with the exception
as the error. A call that outlives ``timeout_s`` is a failure; the call is abandoned, and if it finishes
later its row has already been released, so nothing it could report is recorded.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from airflow.sdk.module_loading import import_string
from psycopg import sql

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.errors import ConfigError
from crawler_ops.hooks import store
from crawler_ops.hooks.store import CrawlerDbHook
from crawler_ops.status_table import PARKED, StatusTable

log = logging.getLogger(__name__)
UserFunction = Callable[[dict[str, Any]], Any]
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class Tables:
    """The configured names resolved against the catalog (actual spelling), ready to compose."""

    source_schema: str
    source_table: str
    status: StatusTable
    id_column: str
    output: tuple[tuple[str, str], ...]  # (name as configured, column)
    sort: tuple[str, ...]
    category_column: str | None

    @property
    def source(self) -> sql.Identifier:
        return sql.Identifier(self.source_schema, self.source_table)

    def category_filter(self) -> sql.Composable:
        if self.category_column is None:
            return sql.SQL("")
        return sql.SQL("AND src.{} = %(category)s").format(sql.Identifier(self.category_column))

    @property
    def src_id(self) -> sql.Composable:
        return sql.SQL("src.{}").format(sql.Identifier(self.id_column))

    def order_by(self, id_expr: sql.Composable) -> sql.Composable:
        columns = [sql.SQL("src.{}").format(sql.Identifier(c)) for c in self.sort]
        return sql.SQL(", ").join([*columns, id_expr])


def split_name(name: str) -> tuple[str, str]:
    schema, _, table = name.rpartition(".")
    return schema or "public", table


def find_table(cur: psycopg.Cursor[Any], cfg: ExecutorTaskConfig, field: str, must_exist: bool) -> tuple[str, str]:
    schema, table = split_name(getattr(cfg, field))
    found = store.find_table(cur, schema, table)
    if found is None:
        if must_exist:
            raise ConfigError(
                f"executor '{cfg.name}': {field} '{getattr(cfg, field)}' does not exist in database "
                f"(connection '{cfg.postgres_conn_id}'); fix {field} in the config"
            )
        return schema, table
    return found


def resolve_tables(cur: psycopg.Cursor[Any], cfg: ExecutorTaskConfig) -> Tables:
    """Check every configured table and column against the catalog; errors name the config entry."""
    schema, table = find_table(cur, cfg, "source_table", must_exist=True)
    columns = store.table_columns(cur, schema, table)

    def column(name: str, field: str) -> str:
        found = columns.get(name.lower())
        if found is None:
            raise ConfigError(
                f"executor '{cfg.name}': {field} names column '{name}', which {schema}.{table} does "
                f"not have (columns: {', '.join(sorted(columns.values()))})"
            )
        return found

    id_column = column("id", "source_table")
    output = tuple((name, column(name, "output_fields")) for name in cfg.output_fields)
    sort = tuple(column(name, "sort_fields") for name in cfg.sort_fields)
    category = column(cfg.category_field, "category_field") if cfg.category is not None else None
    status_schema, status_name = find_table(cur, cfg, "status_table", must_exist=not cfg.create_status_table)
    status = StatusTable.ensure(cur, status_schema, status_name, create=cfg.create_status_table)
    return Tables(schema, table, status, id_column, output, sort, category)


def executor_hook(cfg: ExecutorTaskConfig) -> CrawlerDbHook:
    return CrawlerDbHook(cfg.postgres_conn_id, cfg.name)


def sync_rows(cfg: ExecutorTaskConfig, hook: CrawlerDbHook | None = None) -> dict[str, int]:
    """Validate the config against the catalog and add new source ids to the status table."""
    hook = hook or executor_hook(cfg)
    with hook.transaction(lock=True) as cur:
        tables = resolve_tables(cur, cfg)
        statement = tables.status.statement(
            "sync",
            source=tables.source,
            source_id=sql.Identifier(tables.id_column),
            category_filter=tables.category_filter(),
        )
        inserted = cur.execute(statement, {"task": cfg.name, "category": cfg.category}).rowcount
        tables.status.rank(
            cur,
            cfg.name,
            tables.source,
            sql.Identifier(tables.id_column),
            tables.order_by(tables.src_id),
            tables.category_filter(),
            {"category": cfg.category},
        )
        counts = tables.status.counts(cur, cfg.name)
    log.info(
        "executor %s: %d new rows from %s.%s into %s; status now %s",
        cfg.name,
        inserted,
        tables.source_schema,
        tables.source_table,
        tables.status.label,
        counts,
    )
    return {"inserted": inserted, **counts}


@dataclass
class WorkerCounts:
    claimed: int = 0
    done: int = 0
    failed: int = 0
    parked: int = 0
    fenced: int = 0


def call_succeeded(result: Any) -> bool:
    """The function contract: False, or an old-style ``(id, status)`` with a false status, is a failure."""
    if result is False:
        return False
    return not (isinstance(result, tuple) and len(result) == 2 and not result[1])


class ExecutorWorker:
    """One worker of an executor run: claim, call, record, until its quota or the rows run out.

    :param cfg: the executor task.
    :param owner: the worker's identity within the run (``<run_id>|w<index>``); a retry of the same worker
        uses the same owner, a new try a new token.
    :param quota: rows this worker processes at most in this run.
    """

    def __init__(self, cfg: ExecutorTaskConfig, owner: str, quota: int, hook: CrawlerDbHook | None = None) -> None:
        self.cfg = cfg
        self.owner = owner
        self.token = f"{owner}|{uuid.uuid4().hex[:12]}"
        self.quota = quota
        self.hook = hook or executor_hook(cfg)
        self.function: UserFunction = load_function(cfg)
        self.counts = WorkerCounts()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"udf-{cfg.name}")

    def run(self) -> dict[str, int]:
        with self.hook.transaction() as cur:
            tables = resolve_tables(cur, self.cfg)
        started = last_log = time.monotonic()
        try:
            while self.counts.claimed < self.quota:
                batch = self.claim(tables, min(self.cfg.claim_batch, self.quota - self.counts.claimed))
                if not batch:
                    break
                self.process(tables, batch)
                if time.monotonic() - last_log >= PROGRESS_EVERY_S:
                    self.log_progress(started)
                    last_log = time.monotonic()
            self.log_progress(started)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
        return asdict(self.counts)

    def log_progress(self, started: float) -> None:
        c = self.counts
        log.info(
            "executor %s %s: %d/%d rows claimed (%d done, %d failed, %d parked, %d fenced), %.1f rows/s",
            self.cfg.name,
            self.owner.rsplit("|", 1)[-1],
            c.claimed,
            self.quota,
            c.done,
            c.failed,
            c.parked,
            c.fenced,
            c.claimed / max(time.monotonic() - started, 1e-6),
        )

    def claim(self, tables: Tables, limit: int) -> list[dict[str, Any]]:
        """Claim up to ``limit`` rows and read their output fields, in one transaction."""
        with self.hook.transaction() as cur:
            ids = tables.status.claim_next(
                cur, self.cfg.name, limit, self.token, self.cfg.period, self.cfg.row_retry_delay_s
            )
            if not ids:
                return []
            rows = store.select_rows(
                cur,
                ids,
                columns=sql.SQL(", ").join(sql.Identifier(col) for _, col in tables.output),
                source=tables.source,
                source_id=sql.Identifier(tables.id_column),
                order_by=tables.order_by(tables.src_id),
            )
        self.counts.claimed += len(ids)
        return [{name: value for (name, _), value in zip(tables.output, row, strict=True)} for row in rows]

    def process(self, tables: Tables, rows: Sequence[Mapping[str, Any]]) -> None:
        succeeded: list[int] = []
        failures: list[tuple[int, str]] = []
        id_key = next(name for name, col in tables.output if col == tables.id_column)
        for row in rows:
            error = self.call(dict(row))
            if error is None:
                succeeded.append(int(row[id_key]))
            else:
                failures.append((int(row[id_key]), error))
        with self.hook.transaction() as cur:
            completed = tables.status.complete(cur, self.cfg.name, succeeded, self.token) if succeeded else []
            self.counts.done += len(completed)
            self.counts.fenced += len(succeeded) - len(completed)
            for row_id, error in failures:
                status = tables.status.release(cur, self.cfg.name, row_id, self.token, error, self.cfg.max_attempts)
                if status is None:
                    self.counts.fenced += 1
                elif status == PARKED:
                    self.counts.parked += 1
                else:
                    self.counts.failed += 1
        if len(succeeded) != len(completed):
            log.warning(
                "executor %s: %d rows were re-claimed by another worker after the lease (period=%ss) "
                "expired; their results here were not recorded",
                self.cfg.name,
                len(succeeded) - len(completed),
                self.cfg.period,
            )

    def call(self, row: dict[str, Any]) -> str | None:
        """Run the user function on one row with the timeout; None on success, else the error text."""
        future = self._pool.submit(self.function, row)
        try:
            result = future.result(timeout=self.cfg.timeout_s)
        except FutureTimeout:
            # The stuck call keeps its thread; later calls get a fresh one.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"udf-{self.cfg.name}")
            return f"timed out after {self.cfg.timeout_s:g}s"
        except Exception as exc:  # noqa: BLE001 - the user function's failure is recorded on its row
            return f"{type(exc).__name__}: {exc}"
        return None if call_succeeded(result) else f"function returned {result!r}"


def load_function(cfg: ExecutorTaskConfig) -> UserFunction:
    try:
        function = import_string(cfg.function)
    except ImportError as exc:
        raise ConfigError(f"executor '{cfg.name}': function '{cfg.function}' cannot be imported: {exc}") from exc
    if not callable(function):
        raise ConfigError(f"executor '{cfg.name}': function '{cfg.function}' is not callable")
    return function


def worker_quota(cfg: ExecutorTaskConfig) -> int:
    return math.ceil(cfg.cycle_index / cfg.workers)


def run_worker(cfg: ExecutorTaskConfig, run_id: str, index: int, hook: CrawlerDbHook | None = None) -> dict[str, int]:
    return ExecutorWorker(cfg, f"{run_id}|w{index}", worker_quota(cfg), hook).run()


def summarize(cfg: ExecutorTaskConfig, run_id: str, results: Sequence[Mapping[str, int]]) -> dict[str, Any]:
    """Give back claims this run's workers left behind and count the task's rows per status."""
    hook = executor_hook(cfg)
    with hook.transaction(lock=True) as cur:
        tables = resolve_tables(cur, cfg)
        released = tables.status.release_owner(cur, cfg.name, run_id)
        counts = tables.status.counts(cur, cfg.name)
    totals = {key: sum(int(r.get(key, 0)) for r in results) for key in asdict(WorkerCounts())}
    return {
        "executor": cfg.name,
        "run_id": run_id,
        "workers_finished": len(results),
        "run": totals,
        "released_claims": released,
        "status": counts,
    }
