"""CPU seconds of the processes the benchmark started, and of every process they started in turn, from the kernel's
own accounting (user + system time), not from sampling.

The rule: the benchmark makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so a descendant whose
parent exits before it is handed to the benchmark instead of to init. The CPU a tree has used by a moment is then

- for each live descendant: its own time plus that of the children it waited for (``cpu_times().children_*``: the
  kernel adds a child's whole time, its own waited-for descendants included, to its parent when the parent reaps it),
- plus, for descendants the benchmark itself reaped, ``getrusage(RUSAGE_CHILDREN)`` since the meter started.

A task process that its supervisor (the LocalExecutor worker, a Celery pool process) reaps is so counted in its
supervisor's children time; one whose supervisor died first is reaped by the benchmark. A zombie that nobody has
reaped yet is still a live descendant with its time readable, so nothing is counted twice or lost between two
readings. The difference of two readings is the CPU the tree used in between (a process's exit within a reading is
the only race: it may be read alive and then reaped within the same reading, a few ms).

``exclude`` names processes that are not Airflow's (the Celery broker, Redis): their time, and that of their own
children, is left out, also once the benchmark reaped them (their last reading is subtracted).
"""

from __future__ import annotations

import ctypes
import os
import resource
import time
from contextlib import suppress

import psutil

from crawlbench.common import BenchError

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants of this process are re-parented to it (and reaped by it), not to init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise BenchError(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")


def reaped_cpu() -> float:
    """User + system seconds of every child this process has waited for (and their waited-for descendants)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reap_orphans(timeout: float = 30.0) -> int:
    """Wait for every child of this process until none is left or ``timeout`` passed; returns how many were reaped.
    Call it only when no ``subprocess`` call of this process is waiting for its own child."""
    reaped, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            time.sleep(0.2)
        else:
            reaped += 1
    return reaped


def tree_cpu(pid: int) -> float:
    """CPU of the live process ``pid`` and of its descendants by the module's rule, since they started (the children
    they reaped included): one service's own, e.g. the triggerer and its trigger runner. The difference of two
    readings is what the service used in between; 0 when the process is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    used = 0.0
    for proc in procs:
        with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = proc.cpu_times()
            used += times.user + times.system + times.children_user + times.children_system
    return used


class CpuMeter:
    """CPU seconds used by this process's descendants since the meter was made (see the module's rule)."""

    def __init__(self) -> None:
        become_subreaper()
        self.base = reaped_cpu()
        self.exclude: set[int] = set()
        self._excluded_seen: dict[int, float] = {}
        self.peak_own: dict[int, float] = {}  # pid -> own CPU last read: a lower bound of what the kernel counts

    def total(self) -> float:
        """CPU of the tree since the meter started, as of now."""
        live, alive = 0.0, set()
        for proc in psutil.Process().children(recursive=True):
            with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                times = proc.cpu_times()
                own, children = times.user + times.system, times.children_user + times.children_system
                alive.add(proc.pid)
                if proc.pid in self.exclude or self._under_excluded(proc):
                    self._excluded_seen[proc.pid] = own + children
                    continue
                live += own + children
                self.peak_own[proc.pid] = own
        gone = sum(cpu for pid, cpu in self._excluded_seen.items() if pid not in alive)
        return reaped_cpu() - self.base - gone + live

    def _under_excluded(self, proc: psutil.Process) -> bool:
        with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            return any(parent.pid in self.exclude for parent in proc.parents())
        return False

    def sampled_floor(self) -> float:
        """The sum of every descendant's own CPU at its last reading: what sampling alone sees (short-lived processes
        between readings are missed), a floor that :meth:`total` must reach once the tree is reaped."""
        return sum(self.peak_own.values())
