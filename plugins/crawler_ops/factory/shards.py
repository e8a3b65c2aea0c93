"""Crawl DAGs spread over several DAG files, so no one file outgrows the DAG processor's per-file timeout
(``[dag_processor] dag_file_processing_timeout``, 50 s by default) when the config holds thousands of tasks.

A DAG file named ``crawl_dags_<i>_of_<n>.py`` builds the crawl DAGs of the tasks whose id hashes (CRC-32, stable
across processes and Python versions) to shard ``i`` of ``n``; an invalid task's placeholder DAG goes by its label
the same way. ``python -m crawler_ops dag-shards N`` rewrites the files for ``N`` shards; every DAG keeps its id,
only the file that defines it changes.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

SHARD_FILE = re.compile(r"^crawl_dags_(\d+)_of_(\d+)\.py$")
STUB = '''"""Airflow DAG file: the crawl DAGs of shard {index} of {count} (`python -m crawler_ops dag-shards` wrote it).

Thin on purpose: reads the config and builds only this shard's ``crawl_<id>`` DAGs; no I/O at parse time.
"""

from __future__ import annotations

from crawler_ops.factory.crawl import build_crawl_dags

globals().update(build_crawl_dags(shard_file=__file__))
'''

V = TypeVar("V")


def shard_of(key: str, count: int) -> int:
    """The 0-based shard of a task id (or an invalid entry's label) among ``count``."""
    return zlib.crc32(key.encode("utf-8")) % count


def file_shard(path: str | Path) -> tuple[int, int]:
    """(0-based index, count) from a shard file's name.

    :raises ValueError: when the name is not ``crawl_dags_<i>_of_<n>.py`` with ``1 <= i <= n``.
    """
    found = SHARD_FILE.match(Path(path).name)
    if not found or not 1 <= int(found[1]) <= int(found[2]):
        raise ValueError(f"{Path(path).name}: a crawl DAG shard file is named crawl_dags_<i>_of_<n>.py, 1 <= i <= n")
    return int(found[1]) - 1, int(found[2])


def in_shard(items: Mapping[str, V], index: int, count: int) -> dict[str, V]:
    """The entries of ``items`` (by task id or label) that belong to shard ``index``."""
    return {key: value for key, value in items.items() if shard_of(key, count) == index}


def write_shard_files(folder: Path, count: int) -> list[Path]:
    """Replace the crawl DAG files in ``folder`` (one ``crawl_dags.py`` or earlier shards) by ``count`` shard files."""
    if count < 1:
        raise ValueError("the number of shards is at least 1")
    for old in [
        folder / "crawl_dags.py",
        *(p for p in folder.glob("crawl_dags_*_of_*.py") if SHARD_FILE.match(p.name)),
    ]:
        old.unlink(missing_ok=True)
    written = []
    for index in range(1, count + 1):
        path = folder / f"crawl_dags_{index}_of_{count}.py"
        path.write_text(STUB.format(index=index, count=count), encoding="utf-8")
        written.append(path)
    return written
