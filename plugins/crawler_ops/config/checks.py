"""Checks of single config values.

Every check here but :func:`check_module` is pure: the models' field validators call them. :func:`check_module`
looks for a module on the Python path (it imports the module's parent packages to look), so the models never call
it; :mod:`crawler_ops.config.loading` does, after validation, when asked to (``check_imports``, at DAG parse time).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
# A table (optionally schema-qualified) or column name from config: word characters only, so nothing that
# could carry SQL; names are also checked against the catalog and used only as quoted identifiers.
SQL_NAME = re.compile(r"^[^\W\d]\w{0,62}$")
# Schedules Airflow takes besides cron expressions and cron presets.
SPECIAL_SCHEDULES = ("@once", "@continuous")
FIRST_FIRE_FROM = datetime(2026, 1, 1)


def known_timezone(value: str) -> str:
    """An IANA zone name such as ``Asia/Shanghai`` or ``UTC``."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {value!r}; use an IANA name such as 'Asia/Shanghai' or 'UTC'") from exc
    return value


def check_id(value: str) -> str:
    """Task ids and executor names become DAG ids and status-table values."""
    if not _ID.match(value):
        raise ValueError("use letters, digits, '_', '.', '-' (max 100), not starting with '.' or '-'")
    return value


def check_dotted(value: str | None) -> str | None:
    """A dotted path ``package.module.function`` (its module is looked for by :func:`check_module`, not here)."""
    if value is None:
        return None
    if not DOTTED_PATH.match(value):
        raise ValueError(f"{value!r} is not a dotted path like 'package.module.function'")
    return value


def check_table_name(value: str) -> str:
    """``table`` or ``schema.table``, each part a :data:`SQL_NAME`."""
    parts = value.split(".")
    if len(parts) > 2 or not all(SQL_NAME.match(p) for p in parts):
        raise ValueError(f"{value!r} is not a table name like 'table' or 'schema.table'")
    return value


def check_schedule(value: str | None) -> str | None:
    """None, ``@once``, ``@continuous``, or a cron expression or preset of five fields that fires at all."""
    if value is None or value in SPECIAL_SCHEDULES:
        return value
    hint = "a cron expression such as '0 * * * *' (minute hour day-of-month month day-of-week) or '@hourly'"
    try:
        fires = croniter(value, FIRST_FIRE_FROM)
    except CroniterError as exc:
        raise ValueError(f"{value!r} is not {hint}: {exc}") from exc
    if len(fires.expanded) != 5:
        raise ValueError(f"{value!r} has {len(fires.expanded)} fields; use {hint}")
    try:
        fires.get_next(datetime)
    except CroniterBadDateError as exc:
        raise ValueError(f"{value!r} never fires (no such date); use {hint}") from exc
    return value


def check_module(path: str) -> None:
    """The module of ``path`` can be found without importing it; its parent packages are imported to look."""
    module = path.rpartition(".")[0]
    try:
        spec = importlib.util.find_spec(module)
    except Exception as exc:  # a parent package that fails to import is this field's problem, reported with it
        raise ValueError(f"module '{module}' of {path!r} cannot be found: {type(exc).__name__}: {exc}") from exc
    if spec is None:
        raise ValueError(
            f"module '{module}' of {path!r} cannot be found on the Python path (dags/, plugins/, installed packages)"
        )


def missing_modules(paths: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field, problem)`` for each dotted path of ``paths`` (field -> value) whose module cannot be found; values
    that are no dotted path are the model's to report."""
    for field, value in paths.items():
        if isinstance(value, str) and DOTTED_PATH.match(value):
            try:
                check_module(value)
            except ValueError as exc:
                yield field, str(exc)
