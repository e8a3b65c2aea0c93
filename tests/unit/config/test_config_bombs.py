"""A config is read by every DAG parse, task process and status-view request: a few hundred hostile bytes in it must
cost a bounded time and memory (a format spec's width, a chain of YAML aliases), and the api-server reads it once
per change."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from crawler_ops.config import current_config, load_config, loading
from crawler_ops.errors import ConfigError

TASK = """
tasks:
  - id: wide
    kafka: {topic: t}
    source:
      request:
        query: {offset: "{offset}", limit: "{limit}", tag: "%s"}
"""


@pytest.mark.parametrize("spec", ["{page:0999999999d}", "{task:>999999999}", "{cursor:.999999999}", "{ref:%0999Y}"])
def test_a_format_spec_wider_than_its_bound_fails_validation_at_once(tmp_path: Path, spec: str) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(TASK % spec)

    started = time.monotonic()
    loaded = load_config(path)

    assert time.monotonic() - started < 2.0
    assert "pads or cuts wider than 64 characters" in loaded.errors["wide"], loaded.errors["wide"]


def test_a_modest_format_spec_still_formats(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(TASK % "{offset:08d}-{ref:%Y%m%d}")

    assert load_config(path).errors == {}


def test_a_chain_of_yaml_aliases_is_refused_before_anything_walks_it(tmp_path: Path) -> None:
    # In a POST body (any JSON, validated and walked for templates): each level holds the one below ten times,
    # 10^10 values from a few hundred bytes.
    levels = ["l0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        levels.append(f"l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    body = "{" + ", ".join(levels) + "}"
    path = tmp_path / "tasks.yaml"
    path.write_text(
        f"tasks:\n  - id: bomb\n    kafka: {{topic: t}}\n    source: {{request: {{method: POST, body: {body}}}}}\n"
    )
    assert path.stat().st_size < 900

    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"aliases \(\*name\) expand to [\d,]+ values, more than 5,000,000"):
        load_config(path)

    assert time.monotonic() - started < 2.0


def test_aliases_that_share_a_few_settings_load_as_before(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(
        "tasks:\n  - {id: t0, kafka: &kafka {topic: shared, partitions: 2}}\n"
        + "".join(f"  - {{id: t{i}, kafka: *kafka}}\n" for i in range(1, 50))
    )

    loaded = load_config(path)

    assert loaded.errors == {} and len(loaded.tasks) == 50


def test_the_api_server_reads_the_config_once_per_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - {id: one, kafka: {topic: t}}\n")
    monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(path))
    reads: list[Path] = []
    real = loading.read_document
    monkeypatch.setattr(loading, "read_document", lambda p: reads.append(p) or real(p))

    first = [current_config() for _ in range(5)]
    assert len(reads) == 1 and all(c is first[0] for c in first)

    path.write_text("tasks:\n  - {id: two, kafka: {topic: t}}\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert [t.id for t in current_config().tasks] == ["two"] and len(reads) == 2

    path.write_text("tasks: [")  # broken: its error is kept until the file changes again
    with pytest.raises(ConfigError):
        current_config()
    with pytest.raises(ConfigError):
        current_config()
    assert len(reads) == 3
