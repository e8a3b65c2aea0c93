"""Session fixtures of the integration tests that need Airflow's services (see airflow_session.py), and how the
tests share the stack when pytest-xdist runs them in parallel.

Every test makes its names in the session's namespace (:mod:`tests.namespace`), so tests on different workers
never meet on the stack, except through Airflow's services: one api-server and scheduler on the stack's fixed
port, which the session fixture ``airflow`` starts and ``test_celery`` restarts with the Celery executor. The tests
that use them form the xdist group ``airflow`` and run on one worker, one after another (``--dist loadgroup``),
the ones that restart the services first, so that the session's Airflow, started by the first test that needs
it, stays up for all the others, in any order of the rest.
"""

from __future__ import annotations

import pytest

from tests.integration.airflow_session import airflow, statsd, task_ids, webhook

__all__ = ["airflow", "statsd", "task_ids", "webhook"]

AIRFLOW_GROUP = "airflow"
# Modules that stop Airflow's services and start their own on the same port.
RESTARTS_AIRFLOW = ("test_celery", "test_pools_on_airflow")


def uses_airflow(item: pytest.Item) -> bool:
    return "airflow" in getattr(item, "fixturenames", ()) or restarts_airflow(item)


def restarts_airflow(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and module.__name__.rpartition(".")[2] in RESTARTS_AIRFLOW


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests on Airflow's services in one xdist group, those that restart them first (after any
    shuffling: this hook runs last)."""
    for item in items:
        if uses_airflow(item):
            item.add_marker(pytest.mark.xdist_group(AIRFLOW_GROUP))
    items.sort(key=lambda item: not restarts_airflow(item))  # stable: the order is kept otherwise
