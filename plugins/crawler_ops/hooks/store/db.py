"""The crawler database in PostgreSQL: one connection per hook, transactions, the ``crawler_ops`` schema and catalog
lookups, shared by the hooks of each client (:mod:`~crawler_ops.hooks.store.hook` for the crawl steps,
:mod:`~crawler_ops.hooks.store.reports`, :mod:`~crawler_ops.hooks.store.retention`,
:mod:`~crawler_ops.hooks.store.progress_import`, and the executor DAGs, which use :class:`CrawlerDbHook` itself).

Every statement lives in ``include/sql/<name>.sql`` with bound parameters only. One calling convention: each method
that reads or writes takes the cursor of a transaction the caller opened (``with hook.transaction() as cur``), so the
caller decides what commits together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from airflow.providers.postgres.hooks.postgres import PostgresHook
from psycopg import sql

from crawler_ops.errors import StatusTableError
from crawler_ops.hooks.store.bounded import ACTIVE, BoundedSessions
from crawler_ops.hooks.store.sqlfiles import read_sql

Cursor = psycopg.Cursor[Any]


def fetch_dict(cur: Cursor, statement: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The first row of ``statement`` as a dict by column name (None when there is no row)."""
    row = cur.execute(statement, params).fetchone()
    if row is None:
        return None
    return dict(zip([d.name for d in cur.description or ()], row, strict=True))


def fetch_rows(cur: Cursor, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of ``statement`` as a dict by column name."""
    rows = cur.execute(statement, params).fetchall()
    names = [d.name for d in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in rows]


def schema_stamp() -> str:
    """The comment ``create_schema`` leaves on the schema: the SHA-256 of the schema.sql it applied."""
    return "crawler_ops schema " + hashlib.sha256(read_sql("schema").encode()).hexdigest()


def create_schema(cur: Cursor) -> None:
    """Create or upgrade the ``crawler_ops`` schema (idempotent; concurrent callers wait for each other).

    A schema stamped with this schema.sql is left alone without any lock: re-running the DDL would lock its tables
    (``CREATE INDEX IF NOT EXISTS`` takes a SHARE lock even when the index exists) and could deadlock with runs
    writing those tables."""
    stamp = schema_stamp()
    if _stamp(cur) == stamp:
        return
    # The lock lasts until the outermost transaction ends; on an autocommit connection this block is that
    # transaction (a bare statement would release the lock as soon as it returned, and two first callers would
    # both run CREATE SCHEMA).
    with cur.connection.transaction():
        cur.execute(read_sql("lock_schema"))
        if _stamp(cur) == stamp:
            return
        cur.execute(read_sql("schema"))
        cur.execute(sql.SQL("COMMENT ON SCHEMA crawler_ops IS {}").format(sql.Literal(stamp)))


def _stamp(cur: Cursor) -> str | None:
    row = cur.execute(read_sql("view/schema_version")).fetchone()
    return None if row is None else row[0]


def row_connection(
    hook: PostgresHook, settings: dict[str, str], add_row: str, params: dict[str, Any]
) -> psycopg.Connection:
    """An autocommit connection of its own for one shared row of a source (its pacing, its token): the session
    ``settings`` (such as lock_timeout) set, and the row added by the statement ``add_row`` (the schema created
    first when a request comes before any plan created it)."""
    try:
        db = cast(psycopg.Connection, hook.get_conn())
    except psycopg.OperationalError as exc:
        raise StatusTableError(f"cannot connect to PostgreSQL (connection '{hook.postgres_conn_id}'): {exc}") from exc
    db.autocommit = True
    try:
        for name, value in settings.items():
            db.execute(f"SET {name} = '{value}'")
        try:
            db.execute(read_sql(add_row), params)
        except psycopg.errors.UndefinedTable:
            with db.transaction(), db.cursor() as cur:
                create_schema(cur)
            db.execute(read_sql(add_row), params)
    except BaseException:
        db.close()
        raise
    return db


def schema_exists(cur: Cursor) -> bool:
    return cur.execute(read_sql("view/schema_exists")).fetchone() is not None


def find_table(cur: Cursor, schema: str, table: str) -> tuple[str, str] | None:
    """The catalog's spelling of ``schema.table`` (exact match first, then case-insensitive), None if absent."""
    row = cur.execute(read_sql("executor/find_table"), {"schema": schema, "table": table}).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def table_columns(cur: Cursor, schema: str, table: str) -> dict[str, str]:
    """The columns of ``schema.table``: lower-cased name -> the catalog's spelling."""
    rows = cur.execute(read_sql("executor/table_columns"), {"schema": schema, "table": table}).fetchall()
    return {str(r[0]).lower(): str(r[0]) for r in rows}


class CrawlerDbHook(PostgresHook):
    """A :class:`PostgresHook` with one connection, transactions, and errors that name the task.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param task_id: the crawl or executor task the work is for (``task_name`` in status tables).
    """

    def __init__(self, postgres_conn_id: str, task_id: str) -> None:
        super().__init__(postgres_conn_id=postgres_conn_id)
        self.task_id = task_id
        self.bounded: BoundedSessions | None = None

    @property
    def db(self) -> psycopg.Connection:
        # Not a functools.cached_property: before Python 3.12 it holds one lock per class while it computes, so one
        # hook connecting to a PostgreSQL that does not answer made every other hook of the process wait.
        db = self.__dict__.get("db")
        if db is not None:
            return cast(psycopg.Connection, db)
        try:
            db = self.__dict__["db"] = self.get_conn()
        except psycopg.OperationalError as exc:
            raise StatusTableError(
                f"task {self.task_id}: cannot connect to PostgreSQL (connection '{self.postgres_conn_id}'): {exc}"
            ) from exc
        return cast(psycopg.Connection, db)

    def _create_connection(self, conn_args: dict[str, Any]) -> Any:
        # Inside crawler_ops.hooks.store.bounded.BoundedSessions.active (the status view's report parts): timeouts,
        # shut at the deadline.
        self.bounded = ACTIVE.get()
        if self.bounded is None:
            return super()._create_connection(conn_args)
        return self.bounded.connect(super()._create_connection, conn_args)

    def close(self) -> None:
        """Close the connection if one was opened."""
        db = self.__dict__.pop("db", None)
        if db is not None and self.bounded is not None:
            self.bounded.close(db)
        elif db is not None:
            db.close()

    @contextmanager
    def transaction(self, lock: bool = False) -> Iterator[Cursor]:
        """A transaction; with ``lock``, serialised against other transactions that lock this task."""
        with self.failures_named(), self.db.transaction(), self.db.cursor() as cur:
            if lock:
                self.lock(cur)
            yield cur

    @contextmanager
    def single(self) -> Iterator[Cursor]:
        """A cursor for work that is one statement, which commits on its own (the connection is switched to
        autocommit): one round trip instead of a transaction's three. :meth:`transaction` still works after."""
        with self.failures_named():
            db = self.db
            if not db.autocommit:
                db.autocommit = True
            with db.cursor() as cur:
                yield cur

    @contextmanager
    def failures_named(self) -> Iterator[None]:
        """PostgreSQL failing (connection lost, server gone) inside the block, as an error naming the task."""
        try:
            yield
        except psycopg.OperationalError as exc:
            raise StatusTableError(f"task {self.task_id}: PostgreSQL failed: {exc}") from exc

    def lock(self, cur: Cursor) -> None:
        """Serialise this transaction against the task's plans and commits (held until it ends)."""
        cur.execute(read_sql("lock_task"), {"task": self.task_id})
