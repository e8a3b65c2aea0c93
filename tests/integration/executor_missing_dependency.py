"""A user function whose module imports a dependency that is not installed: it does not import in the executor's
child process (the worker itself never imports it under ``isolation: process``)."""

from __future__ import annotations

import crawler_ops_test_dependency  # type: ignore[import-not-found]  # noqa: F401


def call(row: dict[str, object]) -> None:
    return None
