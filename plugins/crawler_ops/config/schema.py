"""The config file's JSON schema, for editors (``crawler-ops schema``)."""

from __future__ import annotations

from typing import Any

from crawler_ops.config.loading import EXECUTOR_DEFAULTS
from crawler_ops.config.models import CrawlTaskConfig, DagSettings, ExecutorTaskConfig, MaintenanceConfig


def config_schema() -> dict[str, Any]:
    """The JSON schema of a config file, for editors (YAML language servers read JSON schemas). Entries may leave
    out what ``defaults`` gives them, so no property is required; types, ranges and unknown keys are checked."""
    models: dict[str, type[DagSettings]] = {
        "crawl task": CrawlTaskConfig,
        "executor": ExecutorTaskConfig,
        "maintenance": MaintenanceConfig,
    }
    definitions: dict[str, Any] = {}
    schemas = {}
    for name, model in models.items():
        schema = optional_everywhere(model.model_json_schema())
        definitions |= schema.pop("$defs", {})
        schemas[name] = schema
    crawl_defaults = {**schemas["crawl task"], "description": "what every crawl task starts from"}
    crawl_defaults["properties"] = {**crawl_defaults["properties"], EXECUTOR_DEFAULTS: schemas["executor"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "crawler_ops config",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "defaults": crawl_defaults,
            "tasks": {"type": "array", "items": schemas["crawl task"]},
            "executors": {"type": "array", "items": schemas["executor"]},
            "maintenance": schemas["maintenance"],
        },
        "$defs": definitions,
    }


def optional_everywhere(schema: Any) -> Any:
    """``schema`` without ``required`` lists, at every level."""
    if isinstance(schema, dict):
        return {key: optional_everywhere(value) for key, value in schema.items() if key != "required"}
    if isinstance(schema, list):
        return [optional_everywhere(value) for value in schema]
    return schema
