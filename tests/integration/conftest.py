"""Session fixtures of the integration tests that need Airflow's services (see airflow_session.py), and how the
tests share the stack when pytest-xdist runs them in parallel.

Every test makes its names in the session's namespace (:mod:`tests.namespace`), so tests on different workers
never meet on the stack, except through Airflow's services: one api-server and scheduler on the stack's fixed
port, which the session fixture ``airflow`` starts and ``test_celery`` and ``test_pools_on_airflow`` restart with
their own executor. The tests that use them run on one worker, one after another (the scheduler of
:mod:`tests.xdist_airflow`), the ones that restart the services first, so that the session's Airflow, started by
the first test that needs it, stays up for all the others, in any order of the rest.
"""

from __future__ import annotations

import pytest

from tests.integration.airflow_session import airflow, statsd, task_ids, webhook
from tests.xdist_airflow import RESTARTS_AIRFLOW, USES_AIRFLOW, module_name

__all__ = ["airflow", "statsd", "task_ids", "webhook"]


def uses_airflow_fixture(item: pytest.Item) -> bool:
    return "airflow" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test on Airflow's services from a module the xdist scheduler does not group; put the tests on
    Airflow's services last, those that restart them first among them (after any shuffling: this hook runs last).
    Last, because the session's scheduler, once up, also examines the runs ``dag.test()`` writes into the same
    metadata DB: run in one process, no other test runs beside it."""
    strays = sorted({module_name(i.nodeid) for i in items if uses_airflow_fixture(i)} - set(USES_AIRFLOW))
    if strays:
        raise pytest.UsageError(
            f"{', '.join(strays)} use the airflow fixture: add them to USES_AIRFLOW in tests/xdist_airflow.py so "
            "that they run on the one xdist worker that holds Airflow's services"
        )
    items.sort(key=airflow_last)  # stable: the shuffled order is kept otherwise


def airflow_last(item: pytest.Item) -> tuple[bool, bool]:
    module = module_name(item.nodeid)
    return module in USES_AIRFLOW, module not in RESTARTS_AIRFLOW
