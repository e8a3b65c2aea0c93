"""dev/browser.py: the UI tests' Chromium comes from Debian, installed only by root."""

from __future__ import annotations

import pytest

import browser
import debian


def test_an_installed_chromium_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(debian.shutil, "which", lambda name: f"/opt/bin/{name}")
    monkeypatch.setattr(debian.subprocess, "run", lambda *args, **kwargs: pytest.fail("nothing to install"))

    assert browser.chromium() == "/opt/bin/chromium"


def test_a_missing_chromium_without_root_names_the_command_to_run(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)
    monkeypatch.setattr(debian.os, "geteuid", lambda: 1000)

    with pytest.raises(debian.PackageMissing, match=r"apt-get install -y chromium"):
        browser.chromium()
