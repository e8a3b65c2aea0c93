"""The xdist scheduler keeps every test on Airflow's services in one unit of work, on one worker."""

from __future__ import annotations

import re
from pathlib import Path

from tests.xdist_airflow import AIRFLOW_GROUP, RESTARTS_AIRFLOW, USES_AIRFLOW, scope

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"


def test_the_tests_of_every_module_on_airflow_share_one_scope_and_the_others_have_their_own():
    assert scope("tests/integration/test_scheduler.py::test_x") == AIRFLOW_GROUP
    assert scope("tests/integration/test_pools_on_airflow.py::test_y[celery]") == AIRFLOW_GROUP
    assert (
        scope("tests/integration/test_scheduler_notes.py::test_z")
        == "tests/integration/test_scheduler_notes.py::test_z"
    )
    assert scope("tests/unit/test_planning.py::test_a[b@c]") == "tests/unit/test_planning.py::test_a[b@c]"


def test_every_module_that_stops_airflow_is_known_to_restart_it():
    stops = {p.stem for p in INTEGRATION.glob("test_*.py") if re.search(r'"airflow-(down|up)"', p.read_text())}
    assert stops <= set(RESTARTS_AIRFLOW) <= set(USES_AIRFLOW), stops - set(RESTARTS_AIRFLOW)
