"""The ``crawler-ops`` command as installed (no PYTHONPATH): ``validate`` reports every entry with the message its
DAG would show, ``schema`` prints a JSON schema editors can check the YAML with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from crawler_ops.config import load_config

REPO = Path(__file__).resolve().parents[3]
COMMAND = Path(sys.executable).parent / "crawler-ops"


def crawler_ops(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert COMMAND.exists(), f"{COMMAND} is missing: `make` installs the package (pip install -e .)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CRAWLER_OPS_CONFIG")}
    return subprocess.run([str(COMMAND), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    return path


def test_validate_lists_each_entry_and_fails_with_the_messages_dag_parsing_shows(tmp_path: Path) -> None:
    config = write(
        tmp_path / "tasks.yaml",
        {
            "tasks": [
                {"id": "good", "kafka": {"topic": "g"}},
                {"id": "cron", "kafka": {"topic": "c"}, "schedule": "61 * * * *"},
                {"id": "module", "kafka": {"topic": "m"}, "transform": "nope.module.fn"},
            ],
            "maintenance": {"keep_runs_days": 0},
        },
    )

    result = crawler_ops("validate", str(config), cwd=tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "ok: task good (DAG crawl_good)" in result.stdout
    expected = load_config(config, check_imports=True)
    for message in [*expected.errors.values(), expected.maintenance_error]:
        assert f"error: {message}" in result.stderr
    assert "field 'schedule'" in expected.errors["cron"] and "field 'transform'" in expected.errors["module"]
    assert "1 tasks and 0 executors valid, 3 invalid" in result.stdout


def test_validate_passes_the_sample_config_and_names_an_unreadable_file(tmp_path: Path) -> None:
    sample = crawler_ops("validate", str(REPO / "include" / "crawler_tasks.yaml"), cwd=tmp_path)
    (tmp_path / "broken.yaml").write_text("tasks: [\n", encoding="utf-8")
    broken = crawler_ops("validate", str(tmp_path / "broken.yaml"), cwd=tmp_path)

    assert sample.returncode == 0, sample.stderr
    assert "ok: task jobs_beijing" in sample.stdout and "0 invalid" in sample.stdout
    assert broken.returncode == 2 and "broken.yaml is not valid YAML" in broken.stderr


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result = crawler_ops("schema", cwd=tmp_path_factory.mktemp("schema"))
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(document)
    return document


def test_the_schema_accepts_the_sample_config(schema: dict[str, Any]) -> None:
    sample = yaml.safe_load((REPO / "include" / "crawler_tasks.yaml").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(sample)


@pytest.mark.parametrize(
    ("document", "where", "message"),
    [
        ({"tasks": [{"id": "a", "batch_size": "x"}]}, ["tasks", 0, "batch_size"], "is not of type 'integer'"),
        ({"tasks": [{"id": "a", "kafka": {"topik": "t"}}]}, ["tasks", 0, "kafka"], "'topik' was unexpected"),
        ({"defaults": {"executor": {"workers": 0}}}, ["defaults", "executor", "workers"], "less than the minimum"),
        ({"maintenance": {"keep_runs_days": 0}}, ["maintenance", "keep_runs_days"], "less than the minimum"),
        ({"task": []}, [], "'task' was unexpected"),
        (
            {"tasks": [{"id": "a", "source": {"requests_per_s": 0}}]},
            ["tasks", 0, "source", "requests_per_s"],
            "is not valid under any of the given schemas",
        ),
    ],
    ids=[
        "wrong-type",
        "misspelt-key",
        "executor-default-range",
        "maintenance-range",
        "unknown-top-level-key",
        "rate-zero",
    ],
)
def test_the_schema_points_at_what_is_wrong(
    schema: dict[str, Any], document: dict[str, Any], where: list[Any], message: str
) -> None:
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(document))

    assert [(list(e.absolute_path), message in e.message) for e in errors] == [(where, True)], errors
