"""Which tests share Airflow's services, and the pytest-xdist scheduler that runs them on one worker.

The stack has one Airflow api-server and scheduler, on a fixed port: the session fixture ``airflow`` starts them,
and ``test_celery`` and ``test_pools_on_airflow`` stop them and start their own with another executor. Every test of
those modules has to run on the same xdist worker, one after another. xdist's own ``--dist loadgroup`` cannot do it
under pytest 9 (it marks a group by rewriting a node's id, which pytest 9 no longer lets a plugin do), so the
scheduler here groups by module name, which the controller can read from the test ids alone; the modules that share
one costly module-scoped fixture are a unit each, and every other test is a unit of its own, as under
``--dist load``. ``tests/integration/conftest.py`` refuses a test that uses the ``airflow`` fixture from a module not
named here, and runs the modules that restart the services first.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

AIRFLOW_GROUP = "airflow"
# Modules that stop Airflow's services and start their own on the same port.
RESTARTS_AIRFLOW = ("test_celery", "test_pools_on_airflow", "test_watch_on_airflow")
# Every module whose tests use Airflow's services.
USES_AIRFLOW = (*RESTARTS_AIRFLOW, "test_scheduler", "test_scheduler_exactly_once", "test_ui_browser")


def module_name(nodeid: str) -> str:
    """``test_scheduler`` of ``tests/integration/test_scheduler.py::test_x[param]``."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


# Modules whose tests share one costly module-scoped fixture (a chaos run, a Kafka cluster): one unit of work each, so
# the fixture is built once, on one worker, instead of once on each worker that got one of its tests, side by side.
SHARE_A_FIXTURE = ("test_chaos_smoke", "test_kafka_cluster")


def scope(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to: the Airflow group, its module, or the test alone."""
    module = module_name(nodeid)
    if module in USES_AIRFLOW:
        return AIRFLOW_GROUP
    return module if module in SHARE_A_FIXTURE else nodeid


class AirflowGroupScheduling(LoadScopeScheduling):
    """Load scheduling, with every test on Airflow's services in one unit of work (kept in collection order)."""

    def _split_scope(self, nodeid: str) -> str:
        return scope(nodeid)


def make_scheduler(config: Any, log: Any) -> AirflowGroupScheduling:
    return AirflowGroupScheduling(config, log)
