"""A user function whose module stops importing once the file named by CRAWLER_OPS_TEST_BREAK_ON_EXIT exists, as a
module would whose deployment was replaced by a broken one while the executor ran."""

from __future__ import annotations

import os
from pathlib import Path

from tests.integration.executor_crash_functions import BROKEN_MESSAGE, exit_on_row_two

if Path(os.environ.get("CRAWLER_OPS_TEST_BREAK_ON_EXIT", "/nonexistent")).exists():
    raise RuntimeError(BROKEN_MESSAGE)

__all__ = ["exit_on_row_two"]
