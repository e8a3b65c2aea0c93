"""A user function's processes, found by parentage as well as by process group (Linux ``/proc``).

A process the function forks is in the child's process group, which one ``killpg`` ends; but one that calls
``setsid()`` leaves the group and, holding the child's call pipes, would keep the worker waiting for its answer.
So the child makes itself a *subreaper* (``PR_SET_CHILD_SUBREAPER``: whatever it forked stays its descendant even
after a middle process exits), and killing the function's processes kills every descendant of the child, found
through ``/proc``, then its group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
#: Rounds of finding and killing descendants: a process forking while it is being killed is caught by the next.
ROUNDS = 5


def become_subreaper() -> bool:
    """Keep this process's orphaned descendants as its own children (Linux 3.4+); False where it cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def parents() -> dict[int, int]:
    """Every live process's parent, by pid."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields and fields[0] != "Z":
            found[int(stat.parent.name)] = int(fields[1])
    return found


def descendants(pid: int) -> list[int]:
    """The live descendants of ``pid``, children first."""
    children: dict[int, list[int]] = {}
    for child, parent in parents().items():
        children.setdefault(parent, []).append(child)
    found, queue = [], list(children.get(pid, ()))
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(children.get(current, ()))
    return found


def kill_tree(pid: int, group: bool = True, spare: int | None = None) -> None:
    """SIGKILL every descendant of ``pid`` (whatever their group or session) but ``spare`` (the caller, when it is
    one), then ``pid``'s process group."""
    for _ in range(ROUNDS):
        found = [p for p in descendants(pid) if p != spare]
        if not found:
            break
        for process in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(process, signal.SIGKILL)
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
