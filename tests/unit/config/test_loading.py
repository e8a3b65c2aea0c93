"""The models do no I/O: whether a transform's or function's module exists is looked up by loading, after
validation, and reported as the field's own error, in the field's place among the entry's other errors."""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest

from crawler_ops.config import CrawlTaskConfig, ExecutorTaskConfig, parse_config


def test_validating_a_model_never_looks_for_a_module(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model looked for a module")

    monkeypatch.setattr(importlib.util, "find_spec", refuse)

    task = CrawlTaskConfig.model_validate({"id": "a", "kafka": {"topic": "t"}, "transform": "nope.module.fn"})
    executor = ExecutorTaskConfig.model_validate(
        {"name": "e", "source_table": "s", "status_table": "t", "output_fields": ["id"], "function": "nope.m.f"}
    )

    assert (task.transform, executor.function) == ("nope.module.fn", "nope.m.f")


def test_a_missing_module_sits_among_the_entrys_other_errors_in_field_order() -> None:
    entry = {"id": "x", "schedule": "61 * * * *", "batch_size": 0, "transform": "nope.module.fn", "zzz": 1}

    loaded = parse_config({"tasks": [entry]}, "tasks.yaml", check_imports=True)

    fields = re.findall(r"field '([^']+)'", loaded.errors["x"])
    assert fields == ["schedule", "batch_size", "kafka", "transform", "zzz"], loaded.errors["x"]
    assert (
        "field 'transform': Value error, module 'nope.module' of 'nope.module.fn' cannot be found"
        in (loaded.errors["x"])
    )


def test_a_path_that_is_no_dotted_path_is_reported_once_not_looked_for() -> None:
    loaded = parse_config({"tasks": [{"id": "x", "kafka": {"topic": "t"}, "transform": "nope"}]}, check_imports=True)

    assert loaded.errors["x"].count("field 'transform'") == 1
    assert "is not a dotted path" in loaded.errors["x"]
