"""The configuration reference, rendered as Markdown from the models (``crawler-ops config-reference``, ``make
docs``): per section, each key with its type, its bounds, its default and its description, so a default is written
once, in the model, and ``docs/configuration.md`` is regenerated from it (a unit test fails when it is stale).
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, JsonValue
from pydantic.fields import FieldInfo

from crawler_ops.config.kafka import KafkaConfig
from crawler_ops.config.loading import CONFIG_ENV, DEFAULT_CONFIG, EXECUTOR_DEFAULTS, SHARED_DEFAULTS, TOP_LEVEL
from crawler_ops.config.models import CrawlTaskConfig, DagSettings, ExecutorTaskConfig, MaintenanceConfig
from crawler_ops.config.paginators import KINDS
from crawler_ops.config.sections import FilterConfig, NotifyConfig, SourceConfig
from crawler_ops.config.source_auth import KINDS as AUTH_KINDS
from crawler_ops.config.source_paging import RequestConfig
from crawler_ops.config.source_responses import ResponseRule, ResponseWhen
from crawler_ops.config.source_window import WindowFilterConfig
from crawler_ops.config.watch import WatchConfig

SIMPLE_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", datetime: "date or date-time"}
BOUNDS = {annotated_types.Gt: ">", annotated_types.Ge: "≥", annotated_types.Lt: "<", annotated_types.Le: "≤"}


@dataclass(frozen=True)
class Section:
    """One heading of the reference: a model's keys, said where they go in the YAML."""

    title: str
    anchor: str
    model: type[BaseModel]
    where: str

    @property
    def intro(self) -> list[str]:
        summary = " ".join((self.model.__doc__ or "").split("\n\n")[0].split()).replace("``", "`")
        return [markdown(summary), "", self.where]


SECTIONS = (
    Section(
        "DAG settings",
        "dag-settings",
        DagSettings,
        "Keys of every crawl task, executor and of the `maintenance` block, which any of them may also take from "
        "`defaults` (see [Top level](#top-level)).",
    ),
    Section(
        "Crawl task",
        "crawl-task",
        CrawlTaskConfig,
        "An entry of `tasks`; each key may also come from `defaults`. It takes the [DAG settings](#dag-settings) too.",
    ),
    Section("Source", "source", SourceConfig, "`source:` of a crawl task (or of `defaults`)."),
    *(
        Section(
            f"Source paginator: {name}",
            f"source-paginator-{name}",
            kind,
            f"`source.paginator:` with `type: {name}` (see [docs/sources.md](sources.md)).",
        )
        for name, kind in KINDS.items()
    ),
    Section(
        "Source request",
        "source-request",
        RequestConfig,
        "`source.request:`: the request of one page, as templates over `{task}`, `{offset}`, `{limit}`, `{page}`, "
        "`{page_size}`, `{window_start}`, `{window_end}`, `{ref}` (see [docs/sources.md](sources.md)).",
    ),
    Section(
        "Source window filter",
        "source-window-filter",
        WindowFilterConfig,
        "`source.window_filter:`: the parameters that make the source answer only the records of a date window, as "
        "templates over `{window_start}`, `{window_end}`, `{ref}`, `{task}` (see "
        "[sources.md](sources.md#window-filter)).",
    ),
    *(
        Section(
            f"Source auth: {name}",
            f"source-auth-{name}",
            kind,
            f"`source.auth:` with `type: {name}` (see [sources.md](sources.md#authentication)).",
        )
        for name, kind in AUTH_KINDS.items()
    ),
    Section(
        "Source response rules",
        "source-response-rules",
        ResponseRule,
        "Each entry of `source.responses:`: a rule over the envelope of an answer, the first match wins (see "
        "[sources.md](sources.md#response-rules)).",
    ),
    Section(
        "Source response rule conditions",
        "source-response-rule-conditions",
        ResponseWhen,
        "`when:` of a response rule: a value of the envelope at a dotted path with one test, an HTTP status, or both.",
    ),
    Section("Filter", "filter", FilterConfig, "`filter:` of a crawl task (or of `defaults`)."),
    Section("Kafka", "kafka", KafkaConfig, "`kafka:` of a crawl task (or of `defaults`)."),
    Section("Notify", "notify", NotifyConfig, "`notify:` of a crawl task (or of `defaults`); absent: no webhook."),
    Section("Watch", "watch", WatchConfig, "`watch:` of a crawl task (or of `defaults`); absent: the schedule alone."),
    Section(
        "Executor",
        "executor",
        ExecutorTaskConfig,
        "An entry of `executors`. It takes the [DAG settings](#dag-settings) too, which may come from `defaults`; "
        f"any of its keys may come from `defaults.{EXECUTOR_DEFAULTS}`, which wins over `defaults`.",
    ),
    Section(
        "Maintenance",
        "maintenance",
        MaintenanceConfig,
        "The `maintenance:` block. It takes the [DAG settings](#dag-settings) too, with the defaults below; from "
        f"`defaults` only {', '.join(f'`{key}`' for key in SHARED_DEFAULTS)}.",
    ),
)
ANCHORS: Mapping[type[BaseModel], str] = {section.model: section.anchor for section in SECTIONS}


def config_reference() -> str:
    """The whole reference, as the Markdown of ``docs/configuration.md``."""
    contents = ", ".join(f"[{s.title}](#{s.anchor})" for s in SECTIONS)
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from the config model (plugins/crawler_ops/config/) by `make docs`; do not edit. -->",
        "",
        f"Sections: [Top level](#top-level), {contents}.",
        "",
        *top_level(),
    ]
    for section in SECTIONS:
        lines += ["", f"## {section.title}", "", *section.intro, "", *table(section.model, own_fields(section.model))]
    return "\n".join(lines) + "\n"


def top_level() -> list[str]:
    default = f"{DEFAULT_CONFIG.parent.name}/{DEFAULT_CONFIG.name}"
    rows = [f"| `{key}` | {markdown(what)} |" for key, what in TOP_LEVEL.items()]
    rows.insert(
        1, f"| `defaults.{EXECUTOR_DEFAULTS}` | defaults for executors only, over those they take from `defaults` |"
    )
    return [
        "## Top level",
        "",
        f"The config is `${CONFIG_ENV}` (default `{default}`): one YAML file, or a folder whose `*.yaml` / `*.yml` "
        "files are read in name order as one config, each file's `defaults` applying to its own entries (a task id "
        "or executor name defined in two files is an error, and at most one file may hold `maintenance`). An "
        "invalid entry builds a placeholder DAG tagged `config-error` that fails with the message; the others load. "
        "A file named `*.json` (alone, or in the folder) holds the same document as JSON: every DAG file reads the "
        "whole config at each parse, and JSON reads about fifty times faster than YAML, so a config of thousands of "
        "tasks that a program writes is best written as JSON.",
        "",
        "| key | holds |",
        "|---|---|",
        *rows,
        "",
        "Executors take from `defaults` only the [DAG settings](#dag-settings); the `maintenance` block only "
        f"{', '.join(f'`{key}`' for key in SHARED_DEFAULTS)}.",
    ]


def own_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The fields a section lists: a DAG-settings model's own, and the DAG settings it gives another default."""
    if model is DagSettings or not issubclass(model, DagSettings):
        return dict(model.model_fields)
    shared = DagSettings.model_fields
    return {
        name: field
        for name, field in model.model_fields.items()
        if name not in shared or field.get_default() != shared[name].get_default()
    }


def undescribed(model: type[BaseModel]) -> list[str]:
    """The fields of ``model`` without a description."""
    return [name for name, field in model.model_fields.items() if not (field.description or "").strip()]


def table(model: type[BaseModel], fields: Mapping[str, FieldInfo]) -> list[str]:
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for name, field in fields.items():
        description = (field.description or "").strip()
        if not description:
            raise ValueError(f"{model.__name__}.{name} has no description; give it Field(description=...)")
        kind = ", ".join([type_name(field.annotation), *bounds(field)])
        rows.append(
            f"| `{field.alias or name}` | {cell(kind)} | {cell(default_text(field))} | {cell(markdown(description))} |"
        )
    return rows


def type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in args)
    if origin is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in args)
    if origin is tuple:
        item = type_name(args[0])
        return f"list, each {item}" if get_origin(args[0]) is Literal else f"list of {item}"
    if origin is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}"
    if annotation is JsonValue:
        return "any JSON"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{ANCHORS[annotation]}](#{ANCHORS[annotation]})"
    return SIMPLE_TYPES[annotation]


def bounds(field: FieldInfo) -> list[str]:
    found = []
    for item in field.metadata:
        for kind, sign in BOUNDS.items():
            if isinstance(item, kind):
                found.append(f"{sign} {number(getattr(item, kind.__name__.lower()))}")
        if isinstance(item, annotated_types.MaxLen):
            unit = "items" if get_origin(field.annotation) in (tuple, list) else "characters"
            found.append(f"at most {item.max_length} {unit}")
        if getattr(item, "pattern", None):
            found.append(f"matching `{item.pattern}`")
    return found


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its section's defaults"
    if isinstance(value, datetime):
        return f"`{value.isoformat()}`"
    if isinstance(value, float | int) and not isinstance(value, bool):
        return f"`{number(value)}`"
    return f"`{json.dumps(list(value) if isinstance(value, tuple) else value, ensure_ascii=False)}`"


def number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def markdown(text: str) -> str:
    """``text`` with the characters Markdown would read as emphasis or HTML escaped, outside code spans."""
    parts = text.split("`")
    parts[::2] = [re.sub(r"([*<>])", r"\\\1", part) for part in parts[::2]]
    return "`".join(parts)


def cell(text: str) -> str:
    """A table cell: a ``|`` would end it, even in a code span."""
    return text.replace("|", "\\|")
