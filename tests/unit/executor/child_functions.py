"""User functions for the ``isolation: process`` tests: run in the executor's child process, so they live in an
importable module. Rows are ``{"id": ..., "path": ...}``; ``path`` is where a function reports a pid."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any


def fork_sleeper(path: str) -> None:
    """Fork a grandchild that sleeps for ten minutes, and write its pid to ``path``."""
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    Path(f"{path}.tmp").write_text(str(pid))
    os.replace(f"{path}.tmp", path)


def fork_then_hang(row: dict[str, Any]) -> None:
    """A grandchild that would hold the worker's pipe, then a call that never returns."""
    fork_sleeper(row["path"])
    time.sleep(600)


def fork_then_spin_in_c(row: dict[str, Any]) -> None:
    """A grandchild, then a loop in C that never lets go of the GIL (no Python-level thread of the child runs)."""
    fork_sleeper(row["path"])
    sum(itertools.repeat(1, 10**15))


def allocate_mb(row: dict[str, Any]) -> int:
    """Allocate (and touch) ``id`` MB."""
    return len(bytearray(int(row["id"]) * 2**20))


def setsid_sleeper(path: str, double: bool) -> None:
    """Fork a grandchild that leaves the child's process group (``setsid``) and sleeps for ten minutes, holding the
    call pipes it inherited; with ``double``, through a middle process that exits at once (the grandchild is then
    an orphan). Its pid goes to ``path``."""
    pid = os.fork()
    if pid == 0:
        if double and os.fork() != 0:
            os._exit(0)
        os.setsid()
        Path(f"{path}.tmp").write_text(str(os.getpid()))
        os.replace(f"{path}.tmp", path)
        time.sleep(600)
        os._exit(0)
    if double:
        os.waitpid(pid, 0)


def setsid_then_hang(row: dict[str, Any]) -> None:
    setsid_sleeper(row["path"], double=False)
    time.sleep(600)


def double_fork_setsid_then_hang(row: dict[str, Any]) -> None:
    setsid_sleeper(row["path"], double=True)
    time.sleep(600)
