"""The xdist scheduler keeps every test on Airflow's services in one unit of work, on one worker."""

from __future__ import annotations

import re
from pathlib import Path

from tests.xdist_airflow import AIRFLOW_GROUP, RESTARTS_AIRFLOW, SHARE_A_FIXTURE, USES_AIRFLOW, scope

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


def test_the_tests_of_a_module_sharing_a_costly_fixture_share_one_scope():
    first = scope("tests/integration/test_chaos_smoke.py::test_every_scenario_ran_in_both_modes_with_its_fault")
    assert first == scope("tests/integration/test_chaos_smoke.py::test_the_chaos_script_reports_every_target_met")
    assert first != scope("tests/integration/test_kafka_cluster.py::test_x") != AIRFLOW_GROUP


def test_every_module_scoped_fixture_outside_airflow_is_built_on_one_worker():
    # Two workers each building a module's fixture run it twice, side by side (two chaos runs once shared a folder).
    modules = {p.stem for p in INTEGRATION.glob("test_*.py") if 'scope="module"' in p.read_text()}
    assert modules - set(USES_AIRFLOW) <= set(SHARE_A_FIXTURE), modules - set(USES_AIRFLOW) - set(SHARE_A_FIXTURE)
