"""The executor's user-function contract: how a row is passed, how the return value is judged.

Two styles (``function_style`` of an executor):

- ``dict``: ``function(row)`` with ``row`` mapping each configured output field name to its value. Returning
  normally is success, except ``False`` or an ``(id, status)`` pair with a false status, which are failures.
- ``legacy``: ``function(data)`` with ``data = [(value, ...)]``, a one-element list holding the output fields'
  values as a tuple in the configured order, and a return value ``(id, status)``: a true ``status`` is success,
  a false one a failure; ``id`` must be the row's id.

Raising is a failure recorded as ``ExceptionType: message``. Pure standard library: the child process of
``isolation: process`` imports this module without Airflow.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

Style = Literal["dict", "legacy"]
UserFunction = Callable[[Any], Any]


class FunctionLoadError(Exception):
    """The dotted path does not name an importable callable."""


def load_function(path: str) -> UserFunction:
    """The callable at ``package.module.attribute``."""
    module_name, _, attribute = path.rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except Exception as exc:  # whatever the module raises while importing is why it cannot load
        raise FunctionLoadError(f"function '{path}' cannot be imported: {type(exc).__name__}: {exc}") from exc
    if not callable(function):
        raise FunctionLoadError(f"function '{path}' is not callable")
    return function


def argument(style: Style, names: Sequence[str], values: Sequence[Any]) -> Any:
    """What the function receives for one row (``names`` and ``values`` of the output fields, in order)."""
    if style == "legacy":
        return [tuple(values)]
    return dict(zip(names, values, strict=True))


def judge(style: Style, row_id: Any, result: Any) -> str | None:
    """None when ``result`` means success, else the error recorded on the row."""
    if style == "legacy":
        if not isinstance(result, Sequence) or isinstance(result, str | bytes) or len(result) != 2:
            return f"legacy function must return (id, status), returned {result!r}"
        returned_id, status = result
        if returned_id != row_id and str(returned_id) != str(row_id):
            return f"legacy function returned id {returned_id!r} for row {row_id!r}"
        return None if status else f"function returned {result!r}"
    if result is False or (isinstance(result, tuple) and len(result) == 2 and not result[1]):
        return f"function returned {result!r}"
    return None


def call(function: UserFunction, style: Style, names: Sequence[str], values: Sequence[Any], row_id: Any) -> str | None:
    """Call the function on one row: None on success, else the error text."""
    try:
        result = function(argument(style, names, values))
    except Exception as exc:  # noqa: BLE001 - the user function's failure is recorded on its row
        return f"{type(exc).__name__}: {exc}"
    return judge(style, row_id, result)
