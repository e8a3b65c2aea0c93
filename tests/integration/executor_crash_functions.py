"""User functions for the ``isolation: process`` failure tests: each call is logged in
<CRAWLER_OPS_TEST_SCHEMA>.calls with the child's pid (as in :mod:`tests.integration.executor_lease_functions`);
one function makes its child exit in the middle of a call."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.integration.executor_lease_functions import _conn, _log_end, _log_start

# Exit code of a child that leaves mid-call.
EXIT_CODE = 3
# Why tests.integration.executor_breakable no longer imports.
BROKEN_MESSAGE = "the function's settings file is gone"


def exit_on_row_two(row: dict[str, Any]) -> None:
    """Row 2's call ends its process at once, as a C extension's abort or a stray ``os._exit`` would; with
    CRAWLER_OPS_TEST_BREAK_ON_EXIT set, it first leaves that file behind, so the function's module no longer
    imports (:mod:`tests.integration.executor_breakable`)."""
    n = _log_start(int(row["id"]))
    if int(row["id"]) == 2:
        marker = os.environ.get("CRAWLER_OPS_TEST_BREAK_ON_EXIT")
        if marker:
            Path(marker).touch()
        _conn().close()
        os._exit(EXIT_CODE)
    _log_end(n)
