"""A config section that comes in kinds, each a class named by its ``type`` (a paginator, an auth): the kinds of a
union discriminated by ``type``, and the kind an entry without ``type`` is (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel


def kinds_of(union: Any) -> dict[str, type[BaseModel]]:
    """Each kind of an ``Annotated[A | B | ..., Field(discriminator="type")]`` by its ``type``."""
    return {get_args(kind.model_fields["type"].annotation)[0]: kind for kind in get_args(get_args(union)[0])}


def with_type(value: Any, default: str) -> Any:
    """An entry written without ``type`` is of the ``default`` kind."""
    if isinstance(value, Mapping) and "type" not in value:
        return {**value, "type": default}
    return value
