"""Large YAML configs parsed once per machine (crawler_ops.config.document_cache): a second read gets the same
document from the cache, dates included; a changed text is parsed again; small texts, folders others may write to and
documents JSON cannot carry are never cached; a damaged entry is parsed again."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import yaml

from crawler_ops.config import document_cache
from crawler_ops.config.loading import read_document


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(document_cache.CACHE_ENV, str(folder))
    return folder


def large_config(tmp_path: Path, tasks: int = 1500, start: str = "2026-01-01") -> Path:
    path = tmp_path / "tasks.yaml"
    entries = [{"id": f"t{i}", "kafka": {"topic": f"t{i}"}, "start_date": start} for i in range(tasks)]
    text = yaml.safe_dump({"defaults": {"start_date": datetime(2026, 1, 1, 8, tzinfo=UTC)}, "tasks": entries})
    path.write_text(text.replace(f"'{start}'", start), encoding="utf-8")
    assert path.stat().st_size >= document_cache.MIN_BYTES
    return path


def test_a_large_yaml_config_is_read_from_the_cache_the_second_time_dates_and_all(tmp_path, cache, monkeypatch):
    path = large_config(tmp_path)
    first = read_document(path)
    assert len(list(cache.glob("*.json"))) == 1

    monkeypatch.setattr(yaml, "load", lambda *_a, **_k: pytest.fail("parsed again instead of read from the cache"))
    second = read_document(path)

    assert second == first
    assert second["tasks"][0]["start_date"] == date(2026, 1, 1)
    assert second["defaults"]["start_date"] == datetime(2026, 1, 1, 8, tzinfo=UTC)


def test_a_changed_text_is_parsed_again(tmp_path, cache):
    path = large_config(tmp_path)
    read_document(path)
    path.write_text(path.read_text(encoding="utf-8").replace("id: t0\n", "id: renamed\n"), encoding="utf-8")

    assert read_document(path)["tasks"][0]["id"] == "renamed"
    assert len(list(cache.glob("*.json"))) == 2


def test_a_small_config_is_not_cached(tmp_path, cache):
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: a\n    kafka: {topic: a}\n", encoding="utf-8")

    assert read_document(path)["tasks"][0]["id"] == "a"
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_a_folder_others_may_write_to_is_not_used(tmp_path, cache):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    path = large_config(tmp_path)

    assert read_document(path)["tasks"][1]["id"] == "t1"
    assert not list(cache.glob("*.json")), "a shared folder could hand every process a planted document"


def test_a_damaged_entry_is_parsed_again_and_a_document_json_cannot_carry_is_not_kept(tmp_path, cache):
    path = large_config(tmp_path)
    read_document(path)
    (entry,) = cache.glob("*.json")
    entry.write_text("{not json", encoding="utf-8")
    assert read_document(path)["tasks"][2]["id"] == "t2"

    document_cache.keep("x" * document_cache.MIN_BYTES, {"blob": b"\x00"})
    assert document_cache.cached("x" * document_cache.MIN_BYTES) is None
