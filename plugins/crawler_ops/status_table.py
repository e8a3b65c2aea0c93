"""The status-table protocol shared by crawl batches and executor rows.

Layout, compatible with existing status tables: ``(id, status, start_time, end_time, task_name)`` with
``unique(id, task_name)``; status 0 pending, 1 claimed (a lease from ``start_time``), 2 done, 3 parked.
crawler_ops adds ``attempts``, ``last_error`` and ``claim_token`` (idempotently, to existing tables too).
Time columns may be ``timestamptz`` or INT epoch seconds (existing tables); the statements adapt.

Statements live in ``include/sql/status/*.sql`` with ``{placeholders}`` for identifiers and time
expressions only (composed with :mod:`psycopg.sql`); every value is a bound parameter. Completion and
failure are fenced by the claim token, so a worker whose lease was taken over cannot overwrite the new claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from crawler_ops.errors import StatusTableError
from crawler_ops.sqlfiles import read_sql

PENDING, CLAIMED, DONE, PARKED = 0, 1, 2, 3
STATUS_NAMES = {PENDING: "pending", CLAIMED: "claimed", DONE: "done", PARKED: "parked"}
EPOCH_TYPES = frozenset({"integer", "bigint", "numeric", "double precision", "real"})


@cache
def template(name: str) -> str:
    return read_sql(f"status/{name}")


@dataclass(frozen=True)
class StatusTable:
    """A status table: its qualified name and whether its time columns hold epoch seconds.

    :param schema: the table's schema.
    :param name: the table's name.
    :param epoch_times: True for INT epoch-second ``start_time``/``end_time``.
    """

    schema: str
    name: str
    epoch_times: bool = False

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def label(self) -> str:
        return f"{self.schema}.{self.name}"

    def statement(self, name: str, **extra: sql.Composable) -> sql.Composed:
        parts: dict[str, sql.Composable] = {"table": self.ident, **time_parts(self.epoch_times)}
        parts["st_end_empty"] = time_parts(self.epoch_times, "st.")["end_empty"]
        return sql.SQL(template(name)).format(**{**parts, **extra})  # type: ignore[arg-type]

    # ----------------------------------------------------------------- schema

    @classmethod
    def inspect(cls, cur: psycopg.Cursor[Any], schema: str, name: str) -> StatusTable | None:
        """The table as found in the catalog (None when it does not exist)."""
        rows = cur.execute(template("columns"), (schema, name)).fetchall()
        if not rows:
            return None
        columns = {str(c).lower(): str(t) for c, t in rows}
        missing = {"id", "status", "start_time", "end_time", "task_name"} - set(columns)
        if missing:
            raise StatusTableError(
                f"status table {schema}.{name} lacks the columns {sorted(missing)} of the "
                "(id, status, start_time, end_time, task_name) layout"
            )
        return cls(schema, name, epoch_times=columns["start_time"] in EPOCH_TYPES)

    @classmethod
    def ensure(cls, cur: psycopg.Cursor[Any], schema: str, name: str, create: bool = True) -> StatusTable:
        """Create the table when missing (if allowed), add crawler_ops' columns, and check its unique key."""
        table = cls.inspect(cur, schema, name)
        if table is None:
            if not create:
                raise StatusTableError(f"status table {schema}.{name} does not exist and creation is off")
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            cur.execute(cls(schema, name).statement("create"))
            table = cls(schema, name)
        cur.execute(table.statement("upgrade"))
        cur.execute(table.statement("open_index", index=sql.Identifier(f"{name[:50]}_open_idx")))
        if not has_unique_id_task(cur, schema, name):
            raise StatusTableError(
                f"status table {schema}.{name} needs a unique constraint on (id, task_name); add it with "
                f"ALTER TABLE {schema}.{name} ADD UNIQUE (id, task_name)"
            )
        return table

    # ----------------------------------------------------------------- protocol

    def claim_ids(
        self,
        cur: psycopg.Cursor[Any],
        task: str,
        ids: Sequence[int],
        token: str,
        owner: str,
        lease_s: int,
        retry_s: int = 0,
    ) -> list[int]:
        """Claim the given rows; returns those this worker now holds."""
        params = {
            "task": task,
            "ids": list(ids),
            "token": token,
            "owner": like_prefix(owner),
            "lease_s": lease_s,
            "retry_s": retry_s,
        }
        return [int(r[0]) for r in cur.execute(self.statement("claim_ids"), params).fetchall()]

    def claim_next(
        self, cur: psycopg.Cursor[Any], task: str, limit: int, token: str, lease_s: int, retry_s: int
    ) -> list[int]:
        """Claim up to ``limit`` claimable rows in rank order, skipping rows locked by other workers.

        A failed row (attempts > 0) is claimable again only ``retry_s`` seconds after its failure.
        """
        params = {"task": task, "limit": limit, "token": token, "lease_s": lease_s, "retry_s": retry_s}
        return [int(r[0]) for r in cur.execute(self.statement("claim_next"), params).fetchall()]

    def rank(
        self,
        cur: psycopg.Cursor[Any],
        task: str,
        source: sql.Composable,
        source_id: sql.Composable,
        order_by: sql.Composable,
        category_check: sql.Composable,
        params: dict[str, Any],
    ) -> int:
        """Number the task's open rows in the configured order (``seq``); returns how many changed."""
        statement = self.statement(
            "rank", source=source, source_id=source_id, order_by=order_by, category_check=category_check
        )
        return cur.execute(statement, {**params, "task": task}).rowcount

    def renew(self, cur: psycopg.Cursor[Any], task: str, row_id: int, token: str) -> bool:
        """Renew the lease of a row this token still holds; False when it was released or taken over."""
        return cur.execute(self.statement("renew"), {"task": task, "id": row_id, "token": token}).fetchone() is not None

    def complete(self, cur: psycopg.Cursor[Any], task: str, ids: Sequence[int], token: str) -> list[int]:
        """Mark rows done; returns those completed (rows whose claim was taken over are left alone)."""
        rows = cur.execute(self.statement("complete"), {"task": task, "ids": list(ids), "token": token}).fetchall()
        return [int(r[0]) for r in rows]

    def release(
        self, cur: psycopg.Cursor[Any], task: str, row_id: int, token: str, error: str, max_attempts: int | None
    ) -> int | None:
        """Record a failure: pending again, or parked at ``max_attempts``. Returns the new status, or None if fenced."""
        row = cur.execute(
            self.statement("release"),
            {"task": task, "id": row_id, "token": token, "error": error[:2000], "max_attempts": max_attempts},
        ).fetchone()
        return None if row is None else int(row[0])

    def release_owner(self, cur: psycopg.Cursor[Any], task: str, owner: str) -> int:
        """Give back every claim whose token starts with ``owner`` (a finished run's leftovers)."""
        return cur.execute(self.statement("release_owner"), {"task": task, "owner": like_prefix(owner)}).rowcount

    def counts(self, cur: psycopg.Cursor[Any], task: str) -> dict[str, int]:
        rows = cur.execute(self.statement("counts"), {"task": task}).fetchall()
        counts = {name: 0 for name in STATUS_NAMES.values()}
        for status, count in rows:
            counts[STATUS_NAMES.get(int(status), f"status_{status}")] = int(count)
        return counts


def time_parts(epoch_times: bool, prefix: str = "") -> dict[str, sql.Composable]:
    """The time expressions of the statements, for ``timestamptz`` or INT epoch-second time columns."""
    col = f"{prefix}end_time"
    if epoch_times:
        now = "extract(epoch from now())::bigint"
        return {
            "now": sql.SQL(now),
            "lease_cutoff": sql.SQL(now + " - %(lease_s)s"),
            "retry_cutoff": sql.SQL(now + " - %(retry_s)s"),
            "age_cutoff": sql.SQL(now + " - %(age_s)s"),
            "end_empty": sql.SQL("({c} IS NULL OR {c} = 0)").format(c=sql.SQL(col)),
        }
    return {
        "now": sql.SQL("now()"),
        "lease_cutoff": sql.SQL("now() - make_interval(secs => %(lease_s)s)"),
        "retry_cutoff": sql.SQL("now() - make_interval(secs => %(retry_s)s)"),
        "age_cutoff": sql.SQL("now() - make_interval(secs => %(age_s)s)"),
        "end_empty": sql.SQL("{c} IS NULL").format(c=sql.SQL(col)),
    }


def like_prefix(owner: str) -> str:
    """A LIKE pattern matching tokens that start with ``owner|``."""
    escaped = owner.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "|%"


def has_unique_id_task(cur: psycopg.Cursor[Any], schema: str, name: str) -> bool:
    """Whether a unique index covers exactly (id, task_name), as ``ON CONFLICT (id, task_name)`` needs."""
    return cur.execute(template("unique_key"), (schema, name)).fetchone() is not None
