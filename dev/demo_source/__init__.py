"""Demo "job postings" source API used to exercise the crawler locally.

The data model lives in :mod:`demo_source.data` (pure), the ASGI
application in :mod:`demo_source.app`; ``python -m demo_source`` serves it.
"""

from __future__ import annotations

from demo_source.app import DemoSource, create_app
from demo_source.data import (
    Faults,
    TaskConfig,
    TaskState,
    ground_truth,
    make_page,
    make_record,
    true_date,
)

__all__ = [
    "DemoSource",
    "Faults",
    "TaskConfig",
    "TaskState",
    "create_app",
    "ground_truth",
    "make_page",
    "make_record",
    "true_date",
]
