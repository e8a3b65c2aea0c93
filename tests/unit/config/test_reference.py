"""The configuration reference is generated from the models: docs/configuration.md is what they render now, every
field has a description to render, and the defaults shown are the models' own."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pydantic import BaseModel

from crawler_ops.__main__ import main
from crawler_ops.config import config_reference, kafka, models, sections
from crawler_ops.config.reference import table, undescribed

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "docs" / "configuration.md"
MODELS = [
    model
    for module in (sections, kafka, models)
    for _, model in inspect.getmembers(module, inspect.isclass)
    if issubclass(model, BaseModel) and model.__module__ == module.__name__
]


def test_docs_configuration_md_is_what_the_models_render() -> None:
    written = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""

    assert written == config_reference(), f"{REFERENCE.relative_to(REPO)} is stale: run `make docs` and commit it"


@pytest.mark.parametrize("model", MODELS, ids=[model.__name__ for model in MODELS])
def test_every_field_of_every_config_model_has_a_description(model: type[BaseModel]) -> None:
    assert undescribed(model) == [], f"{model.__name__}: give these fields Field(description=...)"


def test_the_config_models_are_all_found() -> None:
    names = {model.__name__ for model in MODELS}

    assert {"SourceConfig", "KafkaConfig", "CrawlTaskConfig", "ExecutorTaskConfig", "MaintenanceConfig"} <= names


def test_a_field_without_a_description_is_found_and_refused_by_the_renderer() -> None:
    class Bare(BaseModel):
        described: int = 1
        bare: int = 2

    Bare.model_fields["described"].description = "has one"

    assert undescribed(Bare) == ["bare"]
    with pytest.raises(ValueError, match=r"Bare\.bare has no description"):
        table(Bare, Bare.model_fields)


def section(title: str) -> str:
    return config_reference().split(f"\n## {title}\n")[1].split("\n## ")[0]


def test_each_key_shows_its_type_bounds_and_the_models_default() -> None:
    assert "| `batch_size` | integer, ≥ 1, ≤ 10000 | `100` | records per page" in section("Crawl task")
    assert "| `requests_per_s` | number or null, > 0 | `10` |" in section("Source")
    assert '| `date_fields` | list of string | `["aae397", "Collect_time"]` |' in section("Filter")
    assert "| `topic` | string, matching `^[A-Za-z0-9._-]{1,249}$` | required |" in section("Kafka")


def test_a_dag_setting_an_entry_gives_another_default_is_listed_with_the_entry() -> None:
    assert '| `schedule` | string or null | `"@hourly"` |' in section("DAG settings")
    assert '| `schedule` | string or null | `"@daily"` |' in section("Maintenance")
    assert "`schedule`" not in section("Crawl task") and "`enabled`" not in section("Maintenance")


def test_the_command_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config-reference"]) == 0
    assert capsys.readouterr().out == config_reference()
