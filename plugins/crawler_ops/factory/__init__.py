"""Config -> DAG objects, one builder module per DAG kind: :mod:`.crawl` (``crawl_<id>``), :mod:`.executor`
(``exec_<name>``), :mod:`.maintenance` (``crawler_ops_maintenance``) and :mod:`.gauges` (``crawler_ops_gauges``);
:mod:`.common` holds what they share.

No network or database access here: this runs at parse time. When a task process starts, only its own
DAG is built (``get_parsing_context``). An invalid task becomes a small DAG whose only task fails with
the validation message, so it is visible in the UI instead of silently missing.

Names are imported from their module on first use, so a DAG file that needs one kind of DAG does not pay
for importing the others (each DAG file imports its builder module directly).
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {
    "build_crawl_dag": "crawl",
    "build_crawl_dags": "crawl",
    "build_executor_dag": "executor",
    "build_executor_dags": "executor",
    "build_gauges_dag": "gauges",
    "build_gauges_dags": "gauges",
    "build_maintenance_dag": "maintenance",
    "build_maintenance_dags": "maintenance",
    "no_retry_for_permanent_errors": "common",
}

__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
