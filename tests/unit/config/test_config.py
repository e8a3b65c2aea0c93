"""Unit tests of crawler_ops.config: the YAML model, defaults merged into tasks, per-task errors."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawler_ops.config import (
    CONFIG_ENV,
    DEFAULT_CONFIG,
    CrawlTaskConfig,
    KafkaConfig,
    MaintenanceConfig,
    NotifyConfig,
    SourceConfig,
    deep_merge,
    get_task,
    load_config,
    parse_config,
)
from crawler_ops.errors import ConfigError

REPO_CONFIG = Path(__file__).resolve().parents[3] / "include" / "crawler_tasks.yaml"


@pytest.fixture
def repo_document() -> dict[str, Any]:
    return yaml.safe_load(REPO_CONFIG.read_text(encoding="utf-8"))


def _with_task(document: dict[str, Any], task: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["tasks"].append(task)
    return changed


# --- the repo's sample config ---------------------------------------------------------------------------------


def test_default_config_path_is_the_repo_sample() -> None:
    assert DEFAULT_CONFIG.resolve() == REPO_CONFIG


def test_repo_config_loads_both_tasks_without_errors() -> None:
    loaded = load_config(REPO_CONFIG)
    assert [t.id for t in loaded.tasks] == ["jobs_beijing", "jobs_shanghai"]
    assert dict(loaded.errors) == {}
    assert [t.dag_id for t in loaded.tasks] == ["crawl_jobs_beijing", "crawl_jobs_shanghai"]
    assert loaded.tasks[0].name == "北京招聘信息"


def test_config_path_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: only_one\n    kafka: {topic: t1}\n", encoding="utf-8")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    assert [t.id for t in load_config().tasks] == ["only_one"]


def test_defaults_are_deep_merged_into_each_task() -> None:
    beijing, shanghai = load_config(REPO_CONFIG).tasks

    assert beijing.batch_size == 500
    assert shanghai.batch_size == 200
    # filter: {days: 3} overrides one key and keeps the defaults' other filter keys
    assert shanghai.filter.days == 3
    assert beijing.filter.days == 7
    assert shanghai.filter.date_fields == ("aae397", "Collect_time")
    assert shanghai.filter.timezone == "Asia/Shanghai"
    assert shanghai.filter.future_tolerance_hours == 24
    # kafka: {topic: ...} keeps the defaults' connection and key field
    assert (shanghai.kafka.topic, shanghai.kafka.conn_id, shanghai.kafka.key_field) == (
        "jobs.shanghai",
        "kafka_default",
        "id",
    )
    assert shanghai.kafka.partitions == 3
    assert shanghai.source.conn_id == "demo_source"
    assert shanghai.source.concurrency == 4
    assert (beijing.schedule, shanghai.schedule) == ("@hourly", "0 */2 * * *")


def test_deep_merge_overrides_leaves_and_leaves_its_inputs_untouched() -> None:
    base = {"a": {"x": 1, "y": {"p": 1}}, "b": [1, 2]}
    override = {"a": {"y": {"q": 2}}, "b": [3]}
    assert deep_merge(base, override) == {"a": {"x": 1, "y": {"p": 1, "q": 2}}, "b": [3]}
    assert base == {"a": {"x": 1, "y": {"p": 1}}, "b": [1, 2]}


def test_source_task_defaults_to_the_task_id() -> None:
    loaded = parse_config(
        {
            "tasks": [
                {"id": "a", "kafka": {"topic": "t"}, "source": {"task": "remote"}},
                {"id": "b", "kafka": {"topic": "t"}},
            ]
        }
    )
    assert [t.source_task for t in loaded.tasks] == ["remote", "b"]


# --- one invalid task -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "label", "field", "message"),
    [
        ({"id": "no_topic"}, "no_topic", "kafka.topic", "Field required"),
        ({"id": "bad_topic", "kafka": {"topic": "has space"}}, "bad_topic", "kafka.topic", "pattern"),
        ({"id": "zero_batch", "batch_size": 0, "kafka": {"topic": "t"}}, "zero_batch", "batch_size", ">= 1|equal to 1"),
        ({"id": "huge_batch", "batch_size": 10_001, "kafka": {"topic": "t"}}, "huge_batch", "batch_size", "10000"),
        ({"id": "typo", "kafka": {"topic": "t"}, "bacth_size": 5}, "typo", "bacth_size", "Extra inputs"),
        ({"id": "nested_typo", "kafka": {"topic": "t", "topik": "u"}}, "nested_typo", "kafka.topik", "Extra inputs"),
        (
            {"id": "bad_tz", "kafka": {"topic": "t"}, "filter": {"timezone": "Mars/Olympus"}},
            "bad_tz",
            "filter.timezone",
            "unknown timezone 'Mars/Olympus'",
        ),
        (
            {"id": "no_fields", "kafka": {"topic": "t"}, "filter": {"date_fields": []}},
            "no_fields",
            "filter.date_fields",
            "at least one date field",
        ),
        (
            {"id": "zero_days", "kafka": {"topic": "t"}, "filter": {"days": 0}},
            "zero_days",
            "filter.days",
            "greater than 0",
        ),
        (
            {"id": "bad_transform", "kafka": {"topic": "t"}, "transform": "not a path"},
            "bad_transform",
            "transform",
            "not a dotted path",
        ),
        (
            {"id": "undotted", "kafka": {"topic": "t"}, "transform": "function"},
            "undotted",
            "transform",
            "not a dotted path",
        ),
        ({"id": "bad id!", "kafka": {"topic": "t"}}, "bad id!", "id", "use letters, digits"),
        ({"id": "-dash", "kafka": {"topic": "t"}}, "-dash", "id", "use letters, digits"),
        ({"id": "x" * 101, "kafka": {"topic": "t"}}, "x" * 101, "id", "max 100"),
        ({"id": "shrink", "kafka": {"topic": "t"}, "on_shrink": "ignore"}, "shrink", "on_shrink", "warn"),
        ({"id": "lease", "kafka": {"topic": "t"}, "claim_lease_s": 1}, "lease", "claim_lease_s", "10"),
        ({"kafka": {"topic": "t"}}, "#2", "id", "Field required"),
        (
            {"id": "no_rate", "kafka": {"topic": "t"}, "source": {"requests_per_s": 0}},
            "no_rate",
            "source.requests_per_s",
            "0 would stop every request; use a positive rate, or null for no rate limit",
        ),
        (
            {"id": "no_flight", "kafka": {"topic": "t"}, "source": {"max_in_flight": 0}},
            "no_flight",
            "source.max_in_flight",
            "greater than or equal to 1",
        ),
    ],
    ids=[
        "missing-kafka-topic",
        "bad-topic-name",
        "batch-size-zero",
        "batch-size-too-big",
        "unknown-field",
        "unknown-nested-field",
        "bad-timezone",
        "no-date-fields",
        "zero-days",
        "transform-with-spaces",
        "transform-without-module",
        "id-with-space",
        "id-starting-with-dash",
        "id-too-long",
        "unknown-on-shrink",
        "lease-too-short",
        "missing-id",
        "rate-zero",
        "in-flight-zero",
    ],
)
def test_an_invalid_task_is_reported_by_id_and_field_while_valid_tasks_load(
    repo_document: dict[str, Any], task: dict[str, Any], label: str, field: str, message: str
) -> None:
    loaded = parse_config(_with_task(repo_document, task), "tasks.yaml")

    assert [t.id for t in loaded.tasks] == ["jobs_beijing", "jobs_shanghai"]
    assert list(loaded.errors) == [label]
    error = loaded.errors[label]
    assert error.startswith("tasks.yaml: task ")
    assert label in error
    assert f"field '{field}'" in error
    assert re.search(message, error), error


def test_a_task_that_is_not_a_mapping_is_reported_by_position(repo_document: dict[str, Any]) -> None:
    loaded = parse_config(_with_task(repo_document, "jobs_guangzhou"), "tasks.yaml")
    assert len(loaded.tasks) == 2
    assert loaded.errors == {"#2": "tasks.yaml: task '#2': must be a mapping"}


def test_an_invalid_default_is_reported_for_every_task(repo_document: dict[str, Any]) -> None:
    repo_document["defaults"]["filter"]["timezone"] = "Mars/Olympus"
    loaded = parse_config(repo_document)
    assert loaded.tasks == ()
    assert sorted(loaded.errors) == ["jobs_beijing", "jobs_shanghai"]
    assert all("field 'filter.timezone'" in e for e in loaded.errors.values())


def test_duplicate_ids_are_reported_and_the_first_task_is_kept(repo_document: dict[str, Any]) -> None:
    duplicate = {"id": "jobs_beijing", "kafka": {"topic": "other"}}
    loaded = parse_config(_with_task(repo_document, duplicate), "tasks.yaml")

    assert [t.id for t in loaded.tasks] == ["jobs_beijing", "jobs_shanghai"]
    assert loaded.tasks[0].kafka.topic == "jobs.beijing"
    [(key, error)] = loaded.errors.items()
    assert key.startswith("jobs_beijing")
    assert "'jobs_beijing': duplicate id" in error


def test_a_duplicate_of_an_invalid_task_is_still_reported() -> None:
    loaded = parse_config({"tasks": [{"id": "a"}, {"id": "a", "kafka": {"topic": "t"}}]})
    assert loaded.tasks == ()
    assert len(loaded.errors) == 2
    assert any("duplicate id" in e for e in loaded.errors.values())


@pytest.mark.parametrize(
    "path", ["pkg..func", "pkg.1mod.func", "pkg..mod.func"], ids=["empty-part", "digit-part", "empty-middle"]
)
def test_a_transform_path_with_an_empty_or_non_identifier_part_is_rejected(path: str) -> None:
    loaded = parse_config({"tasks": [{"id": "t", "kafka": {"topic": "t"}, "transform": path}]})
    assert "field 'transform'" in loaded.errors.get("t", "")


def test_an_unquoted_yaml_start_date_is_accepted() -> None:
    document = yaml.safe_load("tasks:\n  - id: a\n    kafka: {topic: t}\n    start_date: 2026-03-01\n")
    loaded = parse_config(document)
    assert dict(loaded.errors) == {}
    assert [t.id for t in loaded.tasks] == ["a"]


def test_a_start_date_that_is_not_a_date_is_reported_by_task_and_field() -> None:
    loaded = parse_config({"tasks": [{"id": "a", "kafka": {"topic": "t"}, "start_date": "yesterday"}]})
    assert "field 'start_date'" in loaded.errors.get("a", "")


# --- the document as a whole ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [None, [], ["tasks"], "tasks", 42],
    ids=["empty-file", "empty-list", "list", "string", "number"],
)
def test_a_top_level_that_is_not_a_mapping_is_a_config_error(document: Any) -> None:
    with pytest.raises(ConfigError, match=r"^tasks\.yaml: the top level must be a mapping"):
        parse_config(document, "tasks.yaml")


def test_an_unknown_top_level_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown top-level keys \['default'\]"):
        parse_config({"default": {}, "tasks": []}, "tasks.yaml")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"tasks": {"id": "a"}}, "'tasks' must be a list"),
        ({"defaults": ["x"], "tasks": []}, "'defaults' must be a mapping"),
        ({"executors": {"name": "a"}}, "'executors' must be a list"),
    ],
    ids=["tasks-mapping", "defaults-list", "executors-mapping"],
)
def test_wrongly_shaped_sections_are_a_config_error(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(document, "tasks.yaml")


def test_a_document_without_tasks_loads_nothing() -> None:
    loaded = parse_config({"defaults": {"batch_size": 10}})
    assert loaded.tasks == ()
    assert dict(loaded.errors) == {}


def test_a_missing_file_is_a_config_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "tasks.yaml"
    with pytest.raises(ConfigError, match=rf"cannot read crawler config {re.escape(str(path))}.*{CONFIG_ENV}"):
        load_config(path)


def test_invalid_yaml_is_a_config_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: a\n    kafka: {topic: t\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))} is not valid YAML"):
        load_config(path)


def test_task_errors_name_the_file_they_came_from(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: a\n", encoding="utf-8")
    assert load_config(path).errors["a"].startswith(f"{path}: task 'a'")


def test_a_file_that_is_not_utf8_is_a_config_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_bytes("tasks:\n  - id: a\n    name: 北京招聘信息\n    kafka: {topic: t}\n".encode("gbk"))
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_config(path)


# --- get_task ------------------------------------------------------------------------------------------------------


def test_get_task_returns_the_named_task() -> None:
    assert get_task("jobs_shanghai", REPO_CONFIG).batch_size == 200


def test_get_task_raises_the_validation_message_of_an_invalid_task(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: broken\n    batch_size: 0\n    kafka: {topic: t}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"task 'broken': field 'batch_size'"):
        get_task("broken", path)


def test_get_task_names_an_unknown_task_and_the_file() -> None:
    with pytest.raises(ConfigError, match=rf"no crawl task 'jobs_mars' in {re.escape(str(REPO_CONFIG))}"):
        get_task("jobs_mars", REPO_CONFIG)


def test_config_validates_notify_dead_letter_topic_and_maintenance():
    loaded = parse_config(
        {
            "tasks": [
                {"id": "a", "kafka": {"topic": "a", "dead_letter_topic": "bad topic!"}},
                {"id": "b", "kafka": {"topic": "b"}, "notify": {"conn_id": "h", "on": ["sometimes"]}},
                {"id": "c", "kafka": {"topic": "c", "consumer_groups": ["g"]}, "notify": {"conn_id": "h"}},
            ],
            "maintenance": {"delete_batch": 0},
        }
    )

    assert "field 'kafka.dead_letter_topic'" in loaded.errors["a"]
    assert "field 'notify.on[0]'" in loaded.errors["b"]
    (good,) = loaded.tasks
    assert good.notify == NotifyConfig(conn_id="h") and good.notify.on == ("success", "failure")
    assert good.kafka.asset_uri == "kafka://kafka_default/c"
    assert loaded.maintenance is None and "maintenance: field 'delete_batch'" in (loaded.maintenance_error or "")
    assert parse_config({"tasks": []}).maintenance == MaintenanceConfig()
    assert KafkaConfig(topic="t", asset_host="b:9092").asset_uri == "kafka://b:9092/t"


def test_the_dead_letter_topic_must_differ_and_maintenance_takes_the_shared_defaults():
    loaded = parse_config(
        {
            "defaults": {"postgres_conn_id": "pg_main", "schedule": "@hourly", "retries": 5},
            "tasks": [{"id": "a", "kafka": {"topic": "a", "dead_letter_topic": "a"}}],
            "maintenance": {"keep_runs_days": 0.5},
        }
    )
    assert "dead_letter_topic must differ from topic" in loaded.errors["a"]
    assert "keep_runs_days" in (loaded.maintenance_error or "")

    shared = parse_config({"defaults": {"postgres_conn_id": "pg_main", "schedule": "@hourly", "retries": 5}})
    assert shared.maintenance is not None
    assert shared.maintenance.postgres_conn_id == "pg_main"
    assert (shared.maintenance.schedule, shared.maintenance.retries) == ("@daily", 1), "the crawl schedule is not"


# --- delivery ------------------------------------------------------------------------------------------------------


def _crawl_task(**kafka: Any) -> dict[str, Any]:
    return {"tasks": [{"id": "eo", "kafka": {"topic": "t.eo", **kafka}}]}


def test_delivery_defaults_to_at_least_once_and_exactly_once_gets_a_marker_topic_per_task() -> None:
    assert parse_config(_crawl_task(), "tasks.yaml").tasks[0].kafka.delivery == "at_least_once"
    [task] = parse_config(_crawl_task(delivery="exactly_once"), "tasks.yaml").tasks
    assert (task.kafka.delivery, task.marker_topic) == ("exactly_once", "crawler_ops.batches.eo")
    [named] = parse_config(_crawl_task(delivery="exactly_once", marker_topic="eo.markers"), "tasks.yaml").tasks
    assert named.marker_topic == "eo.markers"


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        ({"delivery": "at_most_once"}, r"task 'eo': field 'kafka.delivery'"),
        ({"marker_topic": "t.eo"}, r"task 'eo'.*marker_topic must differ from topic"),
        ({"dead_letter_topic": "t.dead", "marker_topic": "t.dead"}, r"marker_topic must differ from topic and dead"),
    ],
    ids=["unknown-mode", "marker-is-the-topic", "marker-is-the-dead-letter-topic"],
)
def test_a_bad_delivery_setting_is_an_error_naming_the_task_and_field(kafka: dict[str, Any], message: str) -> None:
    loaded = parse_config(_crawl_task(**kafka), "tasks.yaml")
    assert not loaded.tasks
    assert re.search(message, loaded.errors["eo"]), loaded.errors["eo"]


# --- schedules and importable modules, per task --------------------------------------------------------------

EXECUTOR = {
    "name": "rows",
    "source_table": "source_data_table",
    "status_table": "status_table",
    "output_fields": ["id"],
    "function": "crawler_ops.samples.full_address",
}


@pytest.mark.parametrize(
    "schedule",
    [None, "@once", "@continuous", "@hourly", "@daily", "0 */2 * * *", "0 9,18 * * *", "0 9 * * 1-5", "@midnight"],
    ids=["manual", "once", "continuous", "hourly", "daily", "every-2h", "twice-a-day", "weekdays", "croniter-alias"],
)
def test_schedules_airflow_accepts_are_valid(schedule: str | None) -> None:
    loaded = parse_config({"tasks": [{"id": "a", "kafka": {"topic": "t"}, "schedule": schedule}]})
    assert dict(loaded.errors) == {}
    assert loaded.tasks[0].schedule == schedule


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("61 * * * *", r"'61 \* \* \* \*' is not a cron expression .*out of range"),
        ("* * *", r"is not a cron expression"),
        ("@bogus", r"is not a cron expression"),
        ("0 0 30 2 *", r"never fires"),
        ("*/5 * * * * 30", r"has 6 fields"),
    ],
    ids=["minute-61", "three-fields", "unknown-preset", "february-30", "seconds-field"],
)
def test_an_invalid_schedule_is_reported_by_task_and_field(schedule: str, message: str) -> None:
    document = {
        "tasks": [
            {"id": "good", "kafka": {"topic": "g"}},
            {"id": "bad", "kafka": {"topic": "b"}, "schedule": schedule},
        ],
        "executors": [{**EXECUTOR, "schedule": schedule}],
        "maintenance": {"schedule": schedule},
    }
    loaded = parse_config(document, "tasks.yaml")

    assert [t.id for t in loaded.tasks] == ["good"]
    assert loaded.errors["bad"].startswith("tasks.yaml: task 'bad': field 'schedule'")
    assert re.search(message, loaded.errors["bad"]), loaded.errors["bad"]
    assert "field 'schedule'" in loaded.executor_errors["rows"]
    assert loaded.maintenance is None and "field 'schedule'" in (loaded.maintenance_error or "")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nope.module.fn", r"module 'nope.module' of 'nope.module.fn' cannot be found: ModuleNotFoundError"),
        ("crawler_ops.nope.fn", r"module 'crawler_ops.nope' of 'crawler_ops.nope.fn' cannot be found on the"),
        ("json.decoder.nope_fn.x", r"module 'json.decoder.nope_fn' .* cannot be found"),
    ],
    ids=["no-package", "no-module-in-a-package", "attribute-is-not-a-module"],
)
def test_a_transform_or_function_whose_module_is_missing_is_reported_when_imports_are_checked(
    path: str, message: str
) -> None:
    document = {
        "tasks": [{"id": "good", "kafka": {"topic": "g"}}, {"id": "bad", "kafka": {"topic": "b"}, "transform": path}],
        "executors": [EXECUTOR, {**EXECUTOR, "name": "broken", "function": path}],
    }

    checked = parse_config(document, "tasks.yaml", check_imports=True)

    assert [t.id for t in checked.tasks] == ["good"] and [e.name for e in checked.executors] == ["rows"]
    assert checked.errors["bad"].startswith("tasks.yaml: task 'bad': field 'transform'")
    assert re.search(message, checked.errors["bad"]), checked.errors["bad"]
    assert checked.executor_errors["broken"].startswith("tasks.yaml: executor 'broken': field 'function'")
    unchecked = parse_config(document, "tasks.yaml")
    assert dict(unchecked.errors) == {} and dict(unchecked.executor_errors) == {}


def test_a_module_that_exists_is_found_without_being_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "user_transforms.py").write_text("raise RuntimeError('imported at parse time')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    document = {"tasks": [{"id": "a", "kafka": {"topic": "t"}, "transform": "user_transforms.reshape"}]}

    loaded = parse_config(document, check_imports=True)

    assert dict(loaded.errors) == {} and loaded.tasks[0].transform == "user_transforms.reshape"


def test_the_repo_config_passes_the_import_check() -> None:
    loaded = load_config(REPO_CONFIG, check_imports=True)
    assert dict(loaded.errors) == {} and dict(loaded.executor_errors) == {}


# --------------------------------------------------------------------------- a config folder


def write_yaml(path: Path, document: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")


def test_a_folder_of_yaml_files_is_one_config_each_file_with_its_own_defaults(tmp_path: Path) -> None:
    write_yaml(
        tmp_path / "a_beijing.yaml",
        {"defaults": {"batch_size": 200}, "tasks": [{"id": "bj", "kafka": {"topic": "bj"}}]},
    )
    write_yaml(tmp_path / "b_shanghai.yml", {"tasks": [{"id": "sh", "kafka": {"topic": "sh"}}]})
    write_yaml(tmp_path / "c_maintenance.yaml", {"maintenance": {"keep_runs_days": 7}})
    (tmp_path / "notes.txt").write_text("not read", encoding="utf-8")

    loaded = load_config(tmp_path)

    assert [(t.id, t.batch_size) for t in loaded.tasks] == [
        ("bj", 200),
        ("sh", 100),
    ]
    assert loaded.errors == {} and loaded.maintenance is not None and loaded.maintenance.keep_runs_days == 7


def test_a_task_in_two_files_is_an_error_naming_both_and_builds_no_dag(tmp_path: Path) -> None:
    write_yaml(
        tmp_path / "one.yaml",
        {"tasks": [{"id": "dup", "kafka": {"topic": "a"}}, {"id": "ok", "kafka": {"topic": "o"}}]},
    )
    write_yaml(tmp_path / "two.yaml", {"tasks": [{"id": "dup", "kafka": {"topic": "b"}}]})

    loaded = load_config(tmp_path)

    assert [t.id for t in loaded.tasks] == ["ok"]
    assert re.search(r"task 'dup' is defined in .*one\.yaml and .*two\.yaml; keep it in one file", loaded.errors["dup"])


def test_a_json_file_is_read_as_its_yaml_twin_alone_or_in_a_folder(tmp_path: Path) -> None:
    document = yaml.safe_load(REPO_CONFIG.read_text(encoding="utf-8"))
    twin = tmp_path / "tasks.json"
    twin.write_text(json.dumps(document, ensure_ascii=False, default=str), encoding="utf-8")

    assert load_config(twin) == load_config(REPO_CONFIG)

    folder = tmp_path / "folder"
    folder.mkdir()
    write_yaml(folder / "a.yaml", {"tasks": [{"id": "bj", "kafka": {"topic": "bj"}}]})
    (folder / "b.json").write_text(json.dumps({"tasks": [{"id": "sh", "kafka": {"topic": "sh"}}]}), encoding="utf-8")
    assert [t.id for t in load_config(folder).tasks] == ["bj", "sh"]


def test_a_json_file_that_does_not_parse_is_a_config_error_naming_the_path_and_the_place(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('{"tasks": [{"id": "a",}]}', encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(f"{path} is not valid JSON: ") + r".*line 1 column \d+"):
        load_config(path)


def test_two_maintenance_blocks_and_an_empty_folder_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"holds no \.yaml or \.json file"):
        load_config(tmp_path)
    write_yaml(tmp_path / "a.yaml", {"maintenance": {"keep_runs_days": 7}})
    write_yaml(tmp_path / "b.yaml", {"maintenance": {"keep_runs_days": 9}})

    loaded = load_config(tmp_path)

    assert loaded.maintenance is None and "defined in" in (loaded.maintenance_error or "")


# --- source limits ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "chunk_pool", "plan_pool"),
    [
        ({}, ("crawler_source_demo_source", 1), ("crawler_source_demo_source", 1)),
        ({"concurrency": 4, "max_in_flight": 16}, ("crawler_source_demo_source", 1), ("crawler_source_demo_source", 1)),
        ({"concurrency": 16, "max_in_flight": 6}, ("crawler_source_demo_source", 1), ("crawler_source_demo_source", 1)),
        ({"max_in_flight": None}, ("default_pool", 1), ("default_pool", 1)),
        ({"conn_id": "api"}, ("crawler_source_api", 1), ("crawler_source_api", 1)),
    ],
    ids=["defaults", "concurrency-within-the-bound", "concurrency-above-the-bound", "unbounded", "other-connection"],
)
def test_the_steps_that_call_the_source_take_one_slot_of_its_pool_whatever_their_concurrency(
    source: dict[str, Any], chunk_pool: tuple[str, int], plan_pool: tuple[str, int]
) -> None:
    cfg = CrawlTaskConfig.model_validate({"id": "t", "kafka": {"topic": "t"}, "source": source})

    assert (cfg.chunk_pool, cfg.source.pool_slots) == (chunk_pool, plan_pool)


def test_a_pool_set_on_the_task_takes_its_chunks_with_one_slot_each() -> None:
    cfg = CrawlTaskConfig.model_validate({"id": "t", "kafka": {"topic": "t"}, "pool": "crawl_chunks"})

    assert cfg.chunk_pool == ("crawl_chunks", 1)
    assert cfg.source.pool_slots == ("crawler_source_demo_source", 1)


def test_the_default_limits_suit_a_public_api_and_null_turns_them_off() -> None:
    default = SourceConfig()
    off = SourceConfig(requests_per_s=None, max_in_flight=None)

    assert (default.requests_per_s, default.max_in_flight) == (10.0, 8)
    assert (off.requests_per_s, off.max_in_flight, off.pool) == (None, None, None)


def test_the_pool_of_a_connection_has_the_largest_max_in_flight_its_tasks_give() -> None:
    from crawler_ops.ops.pools import pools_document, source_pools

    def task(task_id: str, **source: Any) -> CrawlTaskConfig:
        return CrawlTaskConfig.model_validate({"id": task_id, "kafka": {"topic": task_id}, "source": source})

    tasks = [
        task("a", max_in_flight=4),
        task("b", max_in_flight=12),
        task("c", conn_id="api"),
        task("d", max_in_flight=None, conn_id="x"),
    ]

    document = pools_document(source_pools(tasks).values())

    assert {name: entry["slots"] for name, entry in document.items()} == {
        "crawler_source_demo_source": 12,
        "crawler_source_api": 8,
    }
    assert document["crawler_source_api"]["include_deferred"] is False


# --- value format ----------------------------------------------------------------------------------------------------


def test_value_format_defaults_to_json_and_a_registry_format_defaults_to_freeze() -> None:
    [task] = parse_config(_crawl_task(), "tasks.yaml").tasks
    assert (task.kafka.value_format, task.kafka.value_schema, task.kafka.contract) == ("json", None, None)
    [avro] = parse_config(_crawl_task(value_format="avro"), "tasks.yaml").tasks
    assert (avro.kafka.registry_conn_id, avro.kafka.value_contract) == ("schema_registry", "freeze")


AVRO = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "string"}]}


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        ({"value_schema": AVRO}, "value_schema and contract need value_format json_schema or avro"),
        ({"contract": "evolve"}, "value_schema and contract need value_format json_schema or avro"),
        ({"value_format": "avro", "value_schema": AVRO, "contract": "evolve"}, "with value_schema the schema is yours"),
        ({"value_format": "avro", "value_schema": {"type": "string"}}, "an Avro value_schema must be a record"),
        (
            {"value_format": "avro", "contract": "evolve", "topic_template": "jobs.{city}"},
            "contract evolve with topic_template: each routed topic's subject holds the schema the plan settled",
        ),
        ({"value_format": "json_schema", "value_schema": {"type": 3}}, "not a valid JSON Schema"),
        ({"value_format": "protobuf"}, r"field 'kafka.value_format'"),
    ],
    ids=[
        "schema-without-format",
        "contract-without-format",
        "evolve-a-given-schema",
        "avro-not-a-record",
        "evolve-with-routed-topics",
        "invalid-json-schema",
        "unknown-format",
    ],
)
def test_a_value_format_setting_that_cannot_work_is_refused_naming_it(kafka: dict[str, Any], message: str) -> None:
    loaded = parse_config(_crawl_task(**kafka), "tasks.yaml")
    assert not loaded.tasks
    assert re.search(message, loaded.errors["eo"]), loaded.errors["eo"]


def test_a_feed_takes_a_registry_value_format() -> None:
    document = _crawl_task(value_format="avro", key_field="id")
    document["tasks"][0]["source"] = {"paginator": {"type": "cursor", "cursor_path": "next"}, "count_path": None}
    loaded = parse_config(document, "tasks.yaml")
    assert not loaded.errors and loaded.tasks[0].kafka.value_format == "avro"
