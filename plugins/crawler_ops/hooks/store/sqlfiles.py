"""SQL lives in ``include/sql``: one statement (or one schema) per file, values as bound parameters only."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from crawler_ops.errors import StatusTableError

SQL_DIR = Path(os.environ.get("CRAWLER_OPS_SQL_DIR") or Path(__file__).resolve().parents[4] / "include" / "sql")


@cache
def read_sql(name: str) -> str:
    """The text of ``include/sql/<name>.sql`` (set ``CRAWLER_OPS_SQL_DIR`` when include/ lives elsewhere)."""
    path = SQL_DIR / f"{name}.sql"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StatusTableError(f"missing SQL file {path}; set CRAWLER_OPS_SQL_DIR to the include/sql folder") from exc
