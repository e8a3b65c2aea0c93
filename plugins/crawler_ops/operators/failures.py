"""Which errors of a step fail its task without retries: the failure policy the steps share."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from airflow.sdk.exceptions import AirflowFailException

from crawler_ops.errors import ConfigError, SourceError

if TYPE_CHECKING:
    from crawler_ops.crawl.run import RunContext

T = TypeVar("T")
log = logging.getLogger(__name__)
# How much of an error's text identifies it when looking for it among the errors a run already has.
ERROR_MATCH_CHARS = 500


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


def keep_error_on_run(run: RunContext, step: str, exc: BaseException) -> None:
    """Put the error that failed ``step`` on the run's record, unless the step already recorded it there (a chunk
    records the errors of its batches itself): every failed step leaves its cause where operators look. Never
    raises: PostgreSQL may be why the step failed, and the task's own error must not be hidden."""
    if run.params.dry_run:
        return
    cause = crawler_cause(exc)
    text = f"{type(cause).__name__}: {cause}"
    store = run.store()
    try:
        with store.transaction() as cur:
            record = store.read_run(cur, run.run_id)
            if record is not None and not any(text[:ERROR_MATCH_CHARS] in error for error in record.errors):
                store.add_run_error(cur, run.run_id, f"{step}: {text}")
    except Exception:  # the step's own failure is raised by the caller
        log.exception("task %s: could not keep the error of %s on run %s", run.cfg.id, step, run.run_id)
    finally:
        store.close()
