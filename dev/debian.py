"""Debian packages the local stack and its tests need (redis-server, chromium), installed with apt-get as root
when missing: the registries this project's machines reach include Debian's, and no other download site."""

from __future__ import annotations

import os
import shutil
import subprocess


class PackageMissing(RuntimeError):
    """The command is not installed and could not be."""


def command(binary: str, package: str) -> str:
    """The path of ``binary``: on PATH, else installed from Debian's ``package`` with apt-get (root only)."""
    found = shutil.which(binary)
    if found:
        return found
    if os.geteuid() != 0:
        raise PackageMissing(
            f"{binary} is not installed and this is not root: run `apt-get install -y {package}` as root "
            f"(or put a {binary} on PATH), then try again"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    result = subprocess.run(install, env=env, capture_output=True, text=True)
    if result.returncode != 0:  # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        result = subprocess.run(install, env=env, capture_output=True, text=True)
    found = shutil.which(binary)
    if result.returncode != 0 or not found:
        raise PackageMissing(f"apt-get install {package} failed:\n{result.stdout[-1500:]}{result.stderr[-1500:]}")
    return found
