"""Sample executor functions for the demo config (``executors:`` in include/crawler_tasks.yaml).

An executor function receives one row as a dict of the configured ``output_fields`` (names as written in
the config) and returns normally on success. ``False``, or an old-style ``(id, status)`` tuple with a false
status, or an exception marks the row failed: it returns to pending with the error and the attempt count,
and is parked (status 3) after ``max_attempts``.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def full_address(row: dict[str, Any]) -> str:
    """Build the full address of an area row, e.g. 广东省深圳市南山区; fails when the province is empty."""
    if not row.get("province"):
        raise ValueError(f"row {row.get('id')} has no province")
    address = f"{row['province']}{row.get('city') or ''}{row.get('district') or ''}"
    log.debug("area %s: %s", row.get("id"), address)
    return address
