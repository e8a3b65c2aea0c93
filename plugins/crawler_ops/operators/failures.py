"""Which errors of a step fail its task without retries: the failure policy the steps share."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from airflow.sdk.exceptions import AirflowFailException

from crawler_ops.errors import ConfigError, SourceError

T = TypeVar("T")


def no_retry_for_permanent_errors(step: Callable[[], T]) -> T:
    """Config errors and non-retriable source errors fail at once; Airflow retries everything else."""
    try:
        return step()
    except ConfigError as exc:
        raise AirflowFailException(str(exc)) from exc
    except SourceError as exc:
        if not exc.retriable:
            raise AirflowFailException(str(exc)) from exc
        raise


def crawler_cause(exc: BaseException) -> BaseException:
    """The crawler's own error behind ``exc``: the one an :class:`AirflowFailException` of the policy wraps."""
    if isinstance(exc, AirflowFailException) and exc.__cause__ is not None:
        return exc.__cause__
    return exc
