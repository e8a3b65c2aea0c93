"""What every part of the crawl benchmark agrees on: the reference time and window, the crawl's limits, where
results go, and the error that stops a run."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "bench" / "results"
REF = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW_DAYS = 7.0
TOLERANCE_S = 86_400
MAX_EXPIRED_BATCHES = 5
PARTITIONS = 3
SOURCE_MAX_LIMIT = 1000

Headers = list[tuple[str, str | bytes | None]]


class BenchError(Exception):
    """A problem that stops the benchmark with a clear message (stack down, bad option, failed run)."""


def expected_first_crawl_pages(in_window: int, batch: int) -> int:
    """Pages a first crawl needs: ``ceil(in_window / batch)`` plus the early-stop allowance."""
    return math.ceil(in_window / batch) + MAX_EXPIRED_BATCHES
