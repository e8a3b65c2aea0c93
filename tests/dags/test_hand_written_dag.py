"""A crawl DAG written by hand from the package's steps (tests/dags/hand_written/crawl_by_hand.py) builds with the
steps' own task ids, pools and trigger rule, serialises, and loads from its DAG file; it runs in
tests/integration/test_hand_written_dag.py."""

from __future__ import annotations

from pathlib import Path

import yaml
from airflow.dag_processing.dagbag import BundleDagBag
from airflow.sdk import TriggerRule
from airflow.serialization.serialized_objects import DagSerialization

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunParams
from crawler_ops.operators import ANNOUNCE, COMMIT, CRAWL_CHUNK, PLAN
from tests.dags.hand_written.crawl_by_hand import build_crawl_by_hand

FOLDER = Path(__file__).resolve().parent / "hand_written"
CFG = CrawlTaskConfig.model_validate(
    {"id": "jobs", "kafka": {"topic": "jobs"}, "source": {"concurrency": 4}, "max_parallel_chunks": 3}
)


def test_a_hand_written_dag_gets_the_steps_with_their_ids_pools_and_trigger_rule():
    dag = build_crawl_by_hand(CFG)

    assert {t.task_id for t in dag.tasks} == {PLAN, CRAWL_CHUNK, COMMIT, ANNOUNCE, "report"}
    assert set(dag.params.keys()) == set(RunParams.names())
    assert dag.task_dict[CRAWL_CHUNK].upstream_task_ids == {PLAN}
    assert dag.task_dict[COMMIT].upstream_task_ids == {PLAN, CRAWL_CHUNK}
    assert dag.task_dict[COMMIT].trigger_rule == TriggerRule.ALL_DONE
    assert dag.task_dict[ANNOUNCE].upstream_task_ids == {COMMIT} == dag.task_dict["report"].upstream_task_ids
    pools = {t.task_id: (t.pool, t.pool_slots) for t in dag.tasks}
    assert pools[PLAN] == pools[CRAWL_CHUNK] == ("crawler_source_demo_source", 1)
    assert dag.task_dict[CRAWL_CHUNK].max_active_tis_per_dagrun == 3
    assert [o.uri for o in dag.task_dict[ANNOUNCE].outlets] == [CFG.kafka.asset_uri]


def test_a_hand_written_dag_serialises_as_the_scheduler_reads_it():
    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(build_crawl_by_hand(CFG)))

    assert {t.task_id for t in scheduler_dag.tasks} == {PLAN, CRAWL_CHUNK, COMMIT, ANNOUNCE, "report"}


def test_the_hand_written_dag_file_loads_the_task_it_names(monkeypatch, tmp_path):
    config = tmp_path / "tasks.yaml"
    config.write_text(yaml.safe_dump({"tasks": [{"id": "jobs", "kafka": {"topic": "jobs"}}]}), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    monkeypatch.setenv("CRAWLER_OPS_HAND_WRITTEN_TASK", "jobs")

    bag = BundleDagBag(dag_folder=str(FOLDER), bundle_path=str(FOLDER))

    assert bag.import_errors == {} and set(bag.dag_ids) == {"by_hand_jobs"}


def test_the_hand_written_dag_file_defines_nothing_unless_told_which_task(monkeypatch):
    monkeypatch.delenv("CRAWLER_OPS_HAND_WRITTEN_TASK", raising=False)

    bag = BundleDagBag(dag_folder=str(FOLDER), bundle_path=str(FOLDER))

    assert bag.import_errors == {} and bag.dag_ids == []
