"""A worker process with one ``isolation: process`` child, for a test that SIGKILLs the worker mid-call.

Usage: python -m tests.unit.executor.executor_worker_with_a_child FUNCTION PATH: prints the child's pid, then
calls FUNCTION on the row ``{"id": 1, "path": PATH}`` (which does not return)."""

from __future__ import annotations

import sys

from crawler_ops.executor.calls import ProcessCaller
from crawler_ops.hooks.store.status_table import ClaimedRow

if __name__ == "__main__":
    function, path = sys.argv[1:]
    caller = ProcessCaller(function, "dict", ("id", "path"))
    caller.start()
    assert caller.proc is not None
    print(caller.proc.pid, flush=True)
    caller.call(ClaimedRow(1, True, (1, path)))
