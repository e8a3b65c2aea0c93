"""The browser of the UI tests: Debian's headless Chromium, installed with apt-get when missing (root only).

Playwright drives it through ``executable_path``; Playwright's own browser download is never used, so a machine
that reaches only the package registries can run the tests. ``python dev/browser.py`` installs it and prints
its path.
"""

from __future__ import annotations

import sys

import debian


def chromium() -> str:
    """The path of Debian's ``chromium`` (installed first when missing)."""
    return debian.command("chromium", "chromium")


if __name__ == "__main__":
    try:
        print(chromium())
    except debian.PackageMissing as exc:
        sys.exit(str(exc))
