"""The status-table protocol shared by crawl batches and executor rows.

Layout, compatible with existing status tables: ``(id, status, start_time, end_time, task_name)`` with
``unique(id, task_name)``; status 0 pending, 1 claimed (a lease from ``start_time``), 2 done, 3 parked.
crawler_ops adds ``attempts``, ``last_error``, ``claim_token`` and ``seq`` (idempotently, to existing tables
too). Time columns may be ``timestamptz`` or INT epoch seconds (existing tables); the statements adapt.

Statements live in ``include/sql/status/*.sql`` with ``{placeholders}`` for identifiers and time
expressions only (composed with :mod:`psycopg.sql`); every value is a bound parameter. Completion, failure,
renewal and giving back are fenced by the claim token, so a worker whose lease was taken over cannot overwrite
the new claim. :class:`StatusTable` is the protocol both kinds of rows share; :class:`ExecutorRows` adds what
executors need (ranked claims of several rows within a run's quota, their output fields, un-parking).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from crawler_ops.errors import StatusTableError
from crawler_ops.hooks.store.sqlfiles import read_sql

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
        """The statement ``name`` (``include/sql/status/``) on this table, with ``extra`` parts of its own."""
        return self.compose(name, **extra) if extra else self.composed(name)

    def compose(self, name: str, **extra: sql.Composable) -> sql.Composed:
        parts: dict[str, sql.Composable] = {"table": self.ident, **time_parts(self.epoch_times)}
        parts["st_end_empty"] = time_parts(self.epoch_times, "st.")["end_empty"]
        return sql.SQL(template(name)).format(**{**parts, **extra})  # type: ignore[arg-type]

    @cache  # noqa: B019 - the few status tables live as long as the process anyway
    def composed(self, name: str) -> sql.Composed:
        """This table's statement ``name``, composed once: the claims and completions of a crawl run it for every
        page."""
        return self.compose(name)

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

    def renew(self, cur: psycopg.Cursor[Any], task: str, row_id: int, token: str) -> bool:
        """Renew the lease of a row this token still holds; False when it was released or taken over."""
        return bool(self.renew_many(cur, task, [row_id], token))

    def renew_many(self, cur: psycopg.Cursor[Any], task: str, ids: Sequence[int], token: str) -> list[int]:
        """Renew the leases of rows this token still holds; returns those renewed."""
        rows = cur.execute(self.statement("renew"), {"task": task, "ids": list(ids), "token": token}).fetchall()
        return [int(r[0]) for r in rows]

    def complete(self, cur: psycopg.Cursor[Any], task: str, ids: Sequence[int], token: str) -> list[int]:
        """Mark rows done; returns those completed (rows whose claim was taken over are left alone)."""
        rows = cur.execute(self.statement("complete"), {"task": task, "ids": list(ids), "token": token}).fetchall()
        return [int(r[0]) for r in rows]

    def release(
        self, cur: psycopg.Cursor[Any], task: str, row_id: int, token: str, error: str, max_attempts: int | None
    ) -> int | None:
        """Record a failure: pending again, or parked at ``max_attempts``. Returns the new status, or None if fenced."""
        return self.release_many(cur, task, {row_id: error}, token, max_attempts).get(row_id)

    def release_many(
        self, cur: psycopg.Cursor[Any], task: str, errors: Mapping[int, str], token: str, max_attempts: int | None
    ) -> dict[int, int]:
        """Record failures (row id -> error) in one statement; returns the new status of each row not fenced."""
        params = {
            "task": task,
            "ids": list(errors),
            "errors": [error[:2000] for error in errors.values()],
            "token": token,
            "max_attempts": max_attempts,
        }
        return {int(i): int(status) for i, status in cur.execute(self.statement("release"), params).fetchall()}

    def release_owner(self, cur: psycopg.Cursor[Any], task: str, owner: str) -> int:
        """Give back every claim whose token starts with ``owner`` (a finished run's leftovers)."""
        return cur.execute(self.statement("release_owner"), {"task": task, "owner": like_prefix(owner)}).rowcount

    def counts(self, cur: psycopg.Cursor[Any], task: str) -> dict[str, int]:
        rows = cur.execute(self.statement("counts"), {"task": task}).fetchall()
        counts = {name: 0 for name in STATUS_NAMES.values()}
        for status, count in rows:
            counts[STATUS_NAMES.get(int(status), f"status_{status}")] = int(count)
        return counts


@dataclass(frozen=True)
class SourceParts:
    """The identifiers of an executor's source table that its statements compose (quoted identifiers only).

    :param source: the source table.
    :param source_id: its id column.
    :param columns: the output fields as ``src.<column>, ...``, in the configured order.
    :param order_by: the configured order as ``src.<column>, ..., src.<id>``.
    :param category_check: ``AND src.<category> = %(category)s``, or nothing.
    :param group: what the rows take turns by (``src.<category>`` for every category), or a constant.
    """

    source: sql.Composable
    source_id: sql.Composable
    columns: sql.Composable
    order_by: sql.Composable
    category_check: sql.Composable
    group: sql.Composable


@dataclass(frozen=True)
class ClaimedRow:
    """A row an executor worker claimed: its id, whether its source row still exists, its output values."""

    id: int
    exists: bool
    values: tuple[Any, ...]


@dataclass(frozen=True)
class ExecutorRows:
    """One executor task's rows of its status table, and the quota its runs' workers share.

    Every change of a claimed row is fenced by the claim token; a run's claims are capped by its quota row in
    ``crawler_ops.executor_run`` (:meth:`open_run`), which claims lock, so they take turns.

    :param table: the status table.
    :param task: the executor's ``task_name``.
    """

    table: StatusTable
    task: str

    def sync(self, cur: psycopg.Cursor[Any], parts: SourceParts, category: str | None) -> int:
        """Add the source ids not seen yet (of the category, if one is checked) in one statement; returns how many."""
        statement = self.table.statement(
            "sync", source=parts.source, source_id=parts.source_id, category_filter=parts.category_check
        )
        return cur.execute(statement, {"task": self.task, "category": category}).rowcount

    def rank(self, cur: psycopg.Cursor[Any], parts: SourceParts, category: str | None) -> int:
        """Number the open rows in claim order (``seq``) and refresh the table's statistics; returns how many
        rows changed."""
        names = ("source", "source_id", "order_by", "category_check", "group")
        statement = self.table.statement("rank", **{name: getattr(parts, name) for name in names})
        changed = cur.execute(statement, {"task": self.task, "category": category}).rowcount
        if changed:
            cur.execute(self.table.statement("analyze"))
        return changed

    def claim(
        self, cur: psycopg.Cursor[Any], parts: SourceParts, run_id: str, token: str, limit: int, lease: tuple[int, int]
    ) -> list[ClaimedRow]:
        """Claim up to ``limit`` rows in rank order within the run's quota; ``lease`` is (lease_s, retry_s)."""
        statement = self.table.statement(
            "claim_next", source=parts.source, source_id=parts.source_id, columns=parts.columns
        )
        params = {"task": self.task, "run_id": run_id, "token": token, "limit": limit}
        rows = cur.execute(statement, {**params, "lease_s": lease[0], "retry_s": lease[1]}).fetchall()
        return [ClaimedRow(int(r[0]), bool(r[1]), tuple(r[2:])) for r in rows]

    def renew(self, cur: psycopg.Cursor[Any], ids: Sequence[int], token: str) -> list[int]:
        return self.table.renew_many(cur, self.task, ids, token)

    def complete(self, cur: psycopg.Cursor[Any], ids: Sequence[int], token: str) -> list[int]:
        return self.table.complete(cur, self.task, ids, token)

    def fail(
        self, cur: psycopg.Cursor[Any], errors: Mapping[int, str], token: str, max_attempts: int
    ) -> dict[int, int]:
        return self.table.release_many(cur, self.task, errors, token, max_attempts)

    def give_back(
        self, cur: psycopg.Cursor[Any], run_id: str, ids: Sequence[int], token: str, retry_s: int
    ) -> list[int]:
        """Claimed rows this worker will not start: pending at once, and no longer counted against the quota."""
        params = {"task": self.task, "run_id": run_id, "ids": list(ids), "token": token, "retry_s": retry_s}
        return [int(r[0]) for r in cur.execute(self.table.statement("give_back"), params).fetchall()]

    def release_owner(self, cur: psycopg.Cursor[Any], run_id: str, owner: str) -> int:
        """Claims of tokens starting with ``owner`` go back to pending and no longer count against the quota."""
        released = self.table.release_owner(cur, self.task, owner)
        self.uncount(cur, run_id, released)
        return released

    def uncount(self, cur: psycopg.Cursor[Any], run_id: str, rows: int) -> None:
        if rows:
            cur.execute(template("uncount"), {"task": self.task, "run_id": run_id, "rows": rows})

    def open_run(self, cur: psycopg.Cursor[Any], run_id: str, quota: int) -> None:
        cur.execute(template("open_run"), {"task": self.task, "run_id": run_id, "quota": quota})

    def close_run(self, cur: psycopg.Cursor[Any], run_id: str) -> None:
        cur.execute(template("close_run"), {"task": self.task, "run_id": run_id})

    def unpark(self, cur: psycopg.Cursor[Any], ids: Sequence[int] | None) -> list[int]:
        """Parked rows (all, or those of ``ids``) back to pending with a fresh attempt count."""
        params = {"task": self.task, "all": ids is None, "ids": list(ids or ())}
        return sorted(int(r[0]) for r in cur.execute(self.table.statement("unpark"), params).fetchall())

    def statuses(self, cur: psycopg.Cursor[Any], ids: Sequence[int]) -> dict[int, int]:
        rows = cur.execute(self.table.statement("status_of"), {"task": self.task, "ids": list(ids)}).fetchall()
        return {int(i): int(status) for i, status in rows}

    def parked(self, cur: psycopg.Cursor[Any], limit: int) -> list[dict[str, Any]]:
        """The latest parked rows: id, attempts, last error, when the last attempt failed."""
        rows = cur.execute(self.table.statement("parked"), {"task": self.task, "limit": limit}).fetchall()
        keys = ("id", "attempts", "last_error", "failed_at")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def counts(self, cur: psycopg.Cursor[Any]) -> dict[str, int]:
        return self.table.counts(cur, self.task)


def ensure_runs_table(cur: psycopg.Cursor[Any]) -> None:
    """The table of executor runs' quotas (schema ``crawler_ops`` of the executor's database)."""
    cur.execute(read_sql("lock_schema"))
    cur.execute(template("runs_table"))


def time_parts(epoch_times: bool, prefix: str = "") -> dict[str, sql.Composable]:
    """The time expressions of the statements, for ``timestamptz`` or INT epoch-second time columns."""
    col = f"{prefix}end_time"
    if epoch_times:
        now = "extract(epoch from now())::bigint"
        return {
            "now": sql.SQL(now),
            "lease_cutoff": sql.SQL(now + " - %(lease_s)s"),
            "retry_cutoff": sql.SQL(now + " - %(retry_s)s"),
            "retry_expired": sql.SQL(now + " - %(retry_s)s - 1"),
            "age_cutoff": sql.SQL(now + " - %(age_s)s"),
            "end_empty": sql.SQL("({c} IS NULL OR {c} = 0)").format(c=sql.SQL(col)),
        }
    return {
        "now": sql.SQL("now()"),
        "lease_cutoff": sql.SQL("now() - make_interval(secs => %(lease_s)s)"),
        "retry_cutoff": sql.SQL("now() - make_interval(secs => %(retry_s)s)"),
        "retry_expired": sql.SQL("now() - make_interval(secs => %(retry_s)s + 1)"),
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
