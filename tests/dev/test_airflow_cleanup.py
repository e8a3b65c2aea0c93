"""Which DAGs a test session deletes from Airflow's metadata DB at its end: the ones its configs define, never a
configured one (the deletion itself runs in tests/integration/test_airflow_cleanup.py)."""

from __future__ import annotations

import yaml

from tests.airflow_cleanup import configured_dag_ids, session_dag_ids
from tests.dags.test_dag_integrity import SAMPLE_DAG_IDS as CONFIGURED  # what the dags folder builds from the config


def test_every_dag_the_dags_folder_builds_from_the_repository_config_is_protected():
    assert configured_dag_ids() >= CONFIGURED


def test_a_session_deletes_the_dags_its_configs_define_and_never_a_configured_one(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tasks.yaml").write_text(
        yaml.safe_dump(
            {
                "tasks": [
                    {"id": "t1234", "kafka": {"topic": "x"}},
                    {"id": "bad1234", "batch_size": 0, "kafka": {"topic": "y"}},
                    {"id": "jobs_beijing", "kafka": {"topic": "jobs.beijing"}},
                ],
                "executors": [{"name": "x1234", "source_table": "s", "status_table": "st", "function": "m.f"}],
            }
        ),
        encoding="utf-8",
    )
    (tmp_path / "not_a_config.yaml").write_text("mappings: []\n", encoding="utf-8")
    (tmp_path / "broken.yaml").write_text("tasks: [\n", encoding="utf-8")

    found = session_dag_ids(tmp_path)
    deletable = found - configured_dag_ids()

    assert {"crawl_t1234", "crawl_bad1234", "exec_x1234", "sample_t1234_downstream"} <= deletable
    assert "crawl_jobs_beijing" in found and not deletable & CONFIGURED
