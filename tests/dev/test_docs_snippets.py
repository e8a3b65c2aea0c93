"""The config examples in the documentation are valid configs: every ```yaml block of README.md and docs/**/*.md
that looks like a crawler_ops config (top-level ``tasks``, ``executors``, ``defaults``, ``maintenance``, or a task's
``notify`` / ``source`` / ``filter`` / ``kafka`` block on its own) is read as the loader reads a config file (YAML 1.1:
an unquoted ``on:`` key is the boolean True) and validated by the config model, so copying one never gives a config
error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawler_ops.config import parse_config
from crawler_ops.config.loading import deep_merge

REPO = Path(__file__).resolve().parents[2]
YAML_BLOCK = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
CONFIG_KEYS = {"tasks", "executors", "defaults", "maintenance"}
TASK_BLOCKS = {"notify", "source", "filter", "kafka"}
# What a task needs besides a block shown on its own.
TASK_BASE = {"id": "snippet", "kafka": {"topic": "snippet"}}


def snippets() -> list[tuple[str, str]]:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in YAML_BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(REPO)}:{line}", match.group(1)))
    return found


def as_config(document: Any) -> dict[str, Any] | None:
    """The snippet as a whole config: itself, or a task holding the task blocks it shows; None for other YAML."""
    if not isinstance(document, dict):
        return None
    if set(document) & CONFIG_KEYS:
        return document
    if set(document) & TASK_BLOCKS:
        return {"tasks": [deep_merge(TASK_BASE, document)]}
    return None


CONFIG_SNIPPETS = [(where, text) for where, text in snippets() if as_config(yaml.safe_load(text)) is not None]


def test_the_docs_have_config_snippets_to_check():
    assert len(CONFIG_SNIPPETS) >= 3, "the YAML blocks of the docs were not found"


@pytest.mark.parametrize(("where", "text"), CONFIG_SNIPPETS, ids=[where for where, _ in CONFIG_SNIPPETS])
def test_a_config_snippet_of_the_docs_is_a_valid_config(where, text):
    config = as_config(yaml.safe_load(text))

    loaded = parse_config(config, origin=where)

    problems = [*loaded.errors.values(), *loaded.executor_errors.values()]
    assert not problems, f"{where}: the snippet is not a valid config: {problems}"
    assert loaded.tasks or loaded.executors, f"{where}: the snippet defines no task or executor"


# The README's "A source in every shape" table: one `source:` section a row, in YAML flow style.
SOURCE_ROW = re.compile(r"^\| \[([^\]]+)\].*?\| `(\{.*\})`", re.MULTILINE)


def readme_source_rows() -> list[tuple[str, str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text[text.index("## A source in every shape") :]
    table = table[: table.index("\n## ", 1)]
    return SOURCE_ROW.findall(table)


def test_the_readme_shows_a_source_in_every_mode():
    modes = [mode for mode, _ in readme_source_rows()]
    assert len(modes) >= 13, modes


@pytest.mark.parametrize(("mode", "text"), readme_source_rows(), ids=[mode for mode, _ in readme_source_rows()])
def test_a_source_example_of_the_readme_is_a_valid_config(mode, text):
    where = f"README.md, {mode}"
    loaded = parse_config({"tasks": [deep_merge(TASK_BASE, {"source": yaml.safe_load(text)})]}, origin=where)

    assert not loaded.errors, f"{where}: not a valid source section: {list(loaded.errors.values())}"
    assert loaded.tasks
