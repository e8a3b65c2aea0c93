"""The test session's namespace on the shared stack.

Every name an integration test makes on the services (task ids, and from them topics, consumer groups, schemas,
status rows and demo data sets) carries the session's :data:`TAG`, and one cleanup at the end of the session
(:func:`clean`, run by a session fixture in ``tests/conftest.py``) removes whatever carries it. Sessions sharing a
stack, such as pytest-xdist's workers, each have their own tag and never touch each other's names.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

# A "t" and four hex digits, then eight more per name: random hex never holds a "t", and no fixed word of a name
# is a "t" followed by twelve hex digits, so another session's names never match.
TAG = "t" + uuid.uuid4().hex[:4]
SQL_OURS = TAG + "[0-9a-f]{8}"
OURS = re.compile(SQL_OURS)


def unique_name() -> str:
    """A name no other test of any session uses: the session's tag and eight random hex digits."""
    return TAG + uuid.uuid4().hex[:8]


def ours(name: str) -> bool:
    """Whether ``name`` was made in this session."""
    return OURS.search(name) is not None


@dataclass
class Cleaned:
    """What the cleanup removed, per service, and what it could not."""

    removed: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        done = ", ".join(f"{count} {what}" for what, count in self.removed.items())
        return f"removed {done or 'nothing'}" + (f"; failed: {'; '.join(self.failures)}" if self.failures else "")


def clean(
    pg_uri: str | None, bootstrap: str | None, source_url: str | None, registry_url: str | None = None
) -> Cleaned:
    """Remove what this session made on each service given; a service that fails is reported, the others still
    cleaned."""
    cleaned = Cleaned()
    for what, step, where in (
        ("PostgreSQL", clean_postgres, pg_uri),
        ("Kafka", clean_kafka, bootstrap),
        ("demo source", clean_source, source_url),
        ("schema registry", clean_registry, registry_url),
    ):
        if where is None:
            continue
        try:
            cleaned.removed.update(step(where))
        except Exception as exc:  # noqa: BLE001 - one service down must not keep the others dirty
            cleaned.failures.append(f"{what}: {type(exc).__name__}: {exc}")
    return cleaned


def clean_postgres(pg_uri: str) -> dict[str, int]:
    """The rows of ``crawler_ops.*`` keyed by one of our names, and our schemas and tables."""
    import psycopg
    from psycopg import sql

    counts = {"crawler_ops rows": 0, "schemas": 0, "tables": 0}
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        keyed = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'crawler_ops' "
            "AND column_name IN ('task_id', 'task_name', 'source') AND table_name IN (SELECT table_name FROM "
            "information_schema.tables WHERE table_schema = 'crawler_ops' AND table_type = 'BASE TABLE')"
        ).fetchall()
        for table, column in keyed:
            statement = sql.SQL("DELETE FROM crawler_ops.{} WHERE {} ~ %s").format(
                sql.Identifier(table), sql.Identifier(column)
            )
            counts["crawler_ops rows"] += conn.execute(statement, (SQL_OURS,)).rowcount
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname ~ %s AND nspname <> 'crawler_ops'", (SQL_OURS,)
        ).fetchall()
        for (schema,) in schemas:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            counts["schemas"] += 1
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE tablename ~ %s "
            "AND schemaname NOT IN ('pg_catalog', 'information_schema')",
            (SQL_OURS,),
        ).fetchall()
        for schema, table in tables:
            conn.execute(
                sql.SQL("DROP TABLE IF EXISTS {}.{} CASCADE").format(sql.Identifier(schema), sql.Identifier(table))
            )
            counts["tables"] += 1
    return counts


def clean_kafka(bootstrap: str) -> dict[str, int]:
    """Our topics and consumer groups."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [name for name in admin.list_topics(timeout=30).topics if ours(name)]
    for future in admin.delete_topics(topics, operation_timeout=30).values() if topics else []:
        future.result()
    listed = admin.list_consumer_groups(request_timeout=30).result()
    groups = [group.group_id for group in listed.valid if ours(group.group_id)]
    if groups:
        for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
            future.result()
    return {"topics": len(topics), "consumer groups": len(groups)}


def clean_source(source_url: str) -> dict[str, int]:
    """Our data sets of the demo source."""
    import httpx

    from tests.support import source_admin_headers

    with httpx.Client(base_url=source_url, timeout=30, headers=source_admin_headers()) as http:
        listed: Any = http.get("/admin/tasks").raise_for_status().json()
        names = [name for name in listed["tasks"] if ours(name)]
        for name in names:
            http.delete(f"/admin/tasks/{name}").raise_for_status()
    return {"demo data sets": len(names)}


def clean_registry(registry_url: str) -> dict[str, int]:
    """Our subjects of the schema registry (its Confluent API): deleted, then deleted for good."""
    from urllib.parse import quote

    import httpx

    with httpx.Client(base_url=registry_url, timeout=30) as http:
        subjects = [name for name in http.get("/subjects").raise_for_status().json() if ours(name)]
        for name in subjects:
            http.delete(f"/subjects/{quote(name, safe='')}").raise_for_status()
            http.delete(f"/subjects/{quote(name, safe='')}", params={"permanent": "true"})
    return {"registry subjects": len(subjects)}
