"""An executor's tables checked against the catalog, and the sync step that queues new source rows.

Every configured table and column is looked up in the catalog (names matched exactly, then
case-insensitively) and only ever used as a quoted identifier; values are bound parameters.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.errors import ConfigError, StatusTableError
from crawler_ops.hooks.store import db
from crawler_ops.hooks.store.db import CrawlerDbHook
from crawler_ops.hooks.store.status_table import ExecutorRows, SourceParts, StatusTable, ensure_runs_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tables:
    """The configured names resolved against the catalog (actual spelling), ready to compose.

    :param output: (name as configured, column) of each output field, in the configured order.
    :param category_column: the category column when a category is configured (one, or ``*``).
    :param round_robin: every category, taking turns (``category: "*"``).
    """

    source_schema: str
    source_table: str
    status: StatusTable
    id_column: str
    output: tuple[tuple[str, str], ...]
    sort: tuple[str, ...]
    category_column: str | None
    round_robin: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.output)

    def rows(self, task: str) -> ExecutorRows:
        return ExecutorRows(self.status, task)

    def parts(self) -> SourceParts:
        def src(column: str) -> sql.Composable:
            return sql.SQL("src.{}").format(sql.Identifier(column))

        category = self.category_column
        return SourceParts(
            source=sql.Identifier(self.source_schema, self.source_table),
            source_id=sql.Identifier(self.id_column),
            columns=sql.SQL(", ").join(src(column) for _, column in self.output),
            order_by=sql.SQL(", ").join([*(src(c) for c in self.sort), src(self.id_column)]),
            category_check=(
                sql.SQL("AND {} = %(category)s").format(src(category))
                if category is not None and not self.round_robin
                else sql.SQL("")
            ),
            group=src(category) if category is not None and self.round_robin else sql.SQL("0"),
        )


def split_name(name: str) -> tuple[str, str]:
    schema, _, table = name.rpartition(".")
    return schema or "public", table


def find_table(cur: psycopg.Cursor[Any], cfg: ExecutorTaskConfig, field: str, must_exist: bool) -> tuple[str, str]:
    schema, table = split_name(getattr(cfg, field))
    found = db.find_table(cur, schema, table)
    if found is None:
        if must_exist:
            raise ConfigError(
                f"executor '{cfg.name}': {field} '{getattr(cfg, field)}' does not exist in database "
                f"(connection '{cfg.postgres_conn_id}'); fix {field} in the config"
            )
        return schema, table
    return found


def resolve_tables(cur: psycopg.Cursor[Any], cfg: ExecutorTaskConfig, *, prepare: bool = False) -> Tables:
    """Check every configured table and column against the catalog; errors name the config entry.

    :param prepare: create the status table when missing (if allowed) and add crawler_ops' columns (sync does
        this once per run; workers and the CLI only read the catalog).
    """
    schema, table = find_table(cur, cfg, "source_table", must_exist=True)
    columns = db.table_columns(cur, schema, table)

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
    status_schema, status_name = find_table(
        cur, cfg, "status_table", must_exist=not (prepare and cfg.create_status_table)
    )
    if prepare:
        status = StatusTable.ensure(cur, status_schema, status_name, create=cfg.create_status_table)
    else:
        found = StatusTable.inspect(cur, status_schema, status_name)
        if found is None:
            raise StatusTableError(f"executor '{cfg.name}': status table {status_schema}.{status_name} is missing")
        status = found
    return Tables(schema, table, status, id_column, output, sort, category, cfg.all_categories)


def executor_hook(cfg: ExecutorTaskConfig) -> CrawlerDbHook:
    return CrawlerDbHook(cfg.postgres_conn_id, cfg.name)


def sync_rows(cfg: ExecutorTaskConfig, hook: CrawlerDbHook | None = None) -> dict[str, int]:
    """Validate the config against the catalog, add new source ids to the status table and rank the open rows."""
    hook = hook or executor_hook(cfg)
    with hook.transaction(lock=True) as cur:
        tables = resolve_tables(cur, cfg, prepare=True)
        ensure_runs_table(cur)
        rows, parts = tables.rows(cfg.name), tables.parts()
        category = None if cfg.all_categories else cfg.category
        inserted = rows.sync(cur, parts, category)
        rows.rank(cur, parts, category)
        counts = rows.counts(cur)
    log.info(
        "executor %s: %d new rows from %s.%s into %s%s; status now %s",
        cfg.name,
        inserted,
        tables.source_schema,
        tables.source_table,
        tables.status.label,
        " (every category, taking turns)" if cfg.all_categories else "",
        counts,
    )
    return {"inserted": inserted, **counts}
