"""Crawl DAGs spread over several DAG files: each file builds only its share, every task exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from airflow.dag_processing.dagbag import BundleDagBag

from crawler_ops.factory.shards import file_shard, in_shard, shard_of, write_shard_files

DAGS = Path(__file__).resolve().parents[2] / "dags"
TASKS = 3_000


def test_a_task_keeps_its_shard_across_calls_and_the_shards_are_balanced():
    ids = [f"task_{i}" for i in range(TASKS)]
    sizes = [len(in_shard(dict.fromkeys(ids), index, 4)) for index in range(4)]
    assert sum(sizes) == TASKS and all(abs(size - TASKS / 4) < 150 for size in sizes), sizes
    assert [shard_of("jobs_beijing", 4)] * 3 == [shard_of("jobs_beijing", 4) for _ in range(3)]
    assert shard_of("jobs_beijing", 4) == 0, "CRC-32: the same on every worker, process and Python version"


@pytest.mark.parametrize("name", ["crawl_dags.py", "crawl_dags_0_of_8.py", "crawl_dags_9_of_8.py", "x_1_of_2.py"])
def test_a_file_that_is_no_shard_is_refused_by_name(name):
    with pytest.raises(ValueError, match=r"crawl_dags_<i>_of_<n>\.py"):
        file_shard(name)


def test_dag_shards_replaces_the_crawl_dag_files_and_leaves_the_others(tmp_path):
    for name in ("crawl_dags.py", "crawl_dags_1_of_2.py", "crawl_dags_2_of_2.py", "executor_dags.py"):
        (tmp_path / name).write_text("")

    write_shard_files(tmp_path, 3)

    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["crawl_dags_1_of_3.py", "crawl_dags_2_of_3.py", "crawl_dags_3_of_3.py", "executor_dags.py"]


@pytest.mark.slow
def test_three_thousand_tasks_load_from_eight_files_each_building_its_share(monkeypatch, tmp_path, capsys):
    tasks = [{"id": f"t{i:05d}", "kafka": {"topic": f"jobs.t{i:05d}"}, "schedule": "0 * * * *"} for i in range(TASKS)]
    tasks[7]["batch_size"] = 0  # an invalid task lands in its shard as a config-error DAG
    config = tmp_path / "tasks.yaml"
    config.write_text(yaml.safe_dump({"tasks": tasks}), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    # No parse timeout: how long a file takes depends on the machine's load; what it builds is what is checked.
    monkeypatch.setenv("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "0")

    built: dict[str, set[str]] = {}
    broken_tags: set[str] = set()
    for path in sorted(DAGS.glob("crawl_dags_*_of_8.py")):
        started = time.perf_counter()
        bag = BundleDagBag(dag_folder=str(path), bundle_path=str(DAGS))
        seconds = time.perf_counter() - started
        assert bag.import_errors == {}, bag.import_errors
        built[path.name] = set(bag.dag_ids)
        if "crawl_t00007" in bag.dags:
            broken_tags = set(bag.dags["crawl_t00007"].tags)
        index, count = file_shard(path)
        assert all(shard_of(dag_id.removeprefix("crawl_"), count) == index for dag_id in bag.dag_ids)
        with capsys.disabled():
            print(f"\n{path.name}: {len(bag.dag_ids)} DAGs parsed in {seconds:.1f} s")

    assert len(built) == 8
    every = [dag_id for dag_ids in built.values() for dag_id in dag_ids]
    assert len(every) == len(set(every)) == TASKS, "each task in exactly one file"
    assert "config-error" in broken_tags, "the invalid task t00007 is a config-error DAG in its shard's file"


def test_a_config_folder_builds_the_dags_of_every_file(monkeypatch, tmp_path):
    for name in ("beijing", "shanghai"):
        document = {"tasks": [{"id": f"jobs_{name}", "kafka": {"topic": f"jobs.{name}"}}]}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(tmp_path))

    bag = BundleDagBag(dag_folder=str(DAGS), bundle_path=str(DAGS))

    assert bag.import_errors == {}
    assert {"crawl_jobs_beijing", "crawl_jobs_shanghai"} <= set(bag.dag_ids)


def test_a_shard_file_validates_only_its_own_tasks_and_reports_only_its_own_errors(monkeypatch, tmp_path):
    from crawler_ops.config import loading
    from crawler_ops.factory.crawl import build_crawl_dags

    tasks = [{"id": f"t{i:03d}", "kafka": {"topic": f"jobs.t{i:03d}"}} for i in range(40)]
    tasks[3]["batch_size"] = 0  # invalid: reported by its own shard only
    tasks.append({"id": "t005", "kafka": {"topic": "again"}})  # a duplicate id, keyed "t005@40"
    config = tmp_path / "tasks.yaml"
    config.write_text(yaml.safe_dump({"tasks": tasks}), encoding="utf-8")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(config))
    validated: list[str] = []
    real = loading.validate_entry
    monkeypatch.setattr(
        loading, "validate_entry", lambda model, raw, *a: (validated.append(raw["id"]), real(model, raw, *a))[1]
    )

    built = {}
    for index in range(1, 5):
        validated.clear()
        dags = build_crawl_dags(shard_file=f"crawl_dags_{index}_of_4.py")
        mine = {t["id"] for t in tasks[:40] if shard_of(t["id"], 4) == index - 1}
        assert set(validated) == mine, "only the shard's own tasks are validated"
        built[index] = set(dags)
    every = [dag_id for ids in built.values() for dag_id in ids]
    assert len(every) == len(set(every)), "each DAG in one file"
    assert {f"crawl_t{i:03d}" for i in range(40)} - {"crawl_t003"} <= set(every)
    assert sum(any("t003" in d for d in ids) for ids in built.values()) == 1, "the invalid task's DAG in one shard"
