"""Executor DAGs: a user function over the rows of a source table, driven by a status table.

Steps of a run of ``exec_<name>``:

- :func:`sync_rows` checks the configured tables and columns against the catalog, creates or upgrades the
  status table, adds the source ids it has not seen (for the category) in one set-wise INSERT and ranks the
  open rows in claim order (with ``category: "*"`` the categories take turns);
- :func:`run_worker` (one mapped instance per worker) claims rows of its own task a few at a time within the
  run's shared quota (``cycle_index``), calls the user function on each in a runner thread (or a child
  process), keeps the lease of the row in progress alive, gives back rows it could not start in time, and
  records the outcomes set-wise: done (2), or pending again (0) with the error and attempt count, parked (3)
  at ``max_attempts``. Every write to a claimed row is fenced by the claim token;
- :func:`summarize` gives back claims the run's workers left and counts rows per status.

The user function contract is in :mod:`crawler_ops.executor.udf`, the child process of ``isolation: process`` in
:mod:`crawler_ops.executor.udf_child`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler_ops.executor.calls import load_function
    from crawler_ops.executor.runs import Unparked, executor_status, summarize, unpark
    from crawler_ops.executor.tables import Tables, executor_hook, find_table, resolve_tables, split_name, sync_rows
    from crawler_ops.executor.worker import ExecutorWorker, WorkerCounts, run_worker

# Names load from their module on first use: the child process of ``isolation: process`` runs
# ``python -m crawler_ops.executor.udf_child``, which imports this package first and must not pay for (or need)
# Airflow, which the workers' modules import.
_MODULES = {
    "ExecutorWorker": "worker",
    "Tables": "tables",
    "Unparked": "runs",
    "WorkerCounts": "worker",
    "executor_hook": "tables",
    "executor_status": "runs",
    "find_table": "tables",
    "load_function": "calls",
    "resolve_tables": "tables",
    "run_worker": "worker",
    "split_name": "tables",
    "summarize": "runs",
    "sync_rows": "tables",
    "unpark": "runs",
}

__all__ = [
    "ExecutorWorker",
    "Tables",
    "Unparked",
    "WorkerCounts",
    "executor_hook",
    "executor_status",
    "find_table",
    "load_function",
    "resolve_tables",
    "run_worker",
    "split_name",
    "summarize",
    "sync_rows",
    "unpark",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
