"""Large YAML configs parsed once per machine: the parsed document kept as JSON, keyed by the YAML text's hash.

Every process that reads the config reads its whole text: each DAG file the DAG processor parses, and each task
process, which parses its DAG's file before its own work. For a YAML config of 10,000 tasks that parse costs
about a second of CPU a process, the same JSON about 40 ms. So a YAML text of at least :data:`MIN_BYTES` is looked
up here by its SHA-256 first; a miss parses it and stores the document for the next process (written to a temporary
file and renamed, so a reader never sees half of one). A changed text has another hash: nothing stale is read.

The folder is ``$CRAWLER_OPS_CACHE_DIR``, else ``crawler_ops-<uid>`` in the system's temporary folder. It is used
only when it belongs to this user and no one else may write to it; otherwise nothing is cached. A document holding
a value JSON cannot carry (besides dates and date-times, which are tagged) is not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from datetime import date, datetime
from pathlib import Path
from typing import Any

CACHE_ENV = "CRAWLER_OPS_CACHE_DIR"
#: Smaller texts parse faster than a cache lookup pays for.
MIN_BYTES = 64 * 1024
TAG = "__crawler_ops_yaml__"


def cache_dir() -> Path | None:
    """The cache folder, created when missing; None when it is not this user's alone."""
    folder = Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / f"crawler_ops-{os.getuid()}")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return folder


def entry(text: str) -> Path | None:
    folder = cache_dir() if len(text) >= MIN_BYTES else None
    return None if folder is None else folder / f"{hashlib.sha256(text.encode('utf-8')).hexdigest()}.json"


def cached(text: str) -> Any | None:
    """The document parsed from ``text`` by an earlier process, if one kept it (None: parse it)."""
    path = entry(text)
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_hook=untag)
    except (OSError, ValueError):
        return None


def keep(text: str, document: Any) -> None:
    """Keep the document parsed from ``text`` for the next process (nothing when it cannot be kept)."""
    path = entry(text)
    if path is None:
        return
    try:
        encoded = json.dumps(document, default=tag, ensure_ascii=False)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as out:
            out.write(encoded)
        os.replace(out.name, path)
    except (OSError, TypeError, ValueError):
        return


def tag(value: Any) -> dict[str, str]:
    if isinstance(value, datetime):
        return {TAG: "datetime", "iso": value.isoformat()}
    if isinstance(value, date):
        return {TAG: "date", "iso": value.isoformat()}
    raise TypeError(f"{type(value).__name__} is not kept")


def untag(value: dict[str, Any]) -> Any:
    kind = value.get(TAG)
    if kind == "datetime":
        return datetime.fromisoformat(value["iso"])
    if kind == "date":
        return date.fromisoformat(value["iso"])
    return value
