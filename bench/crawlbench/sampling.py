"""Processes measured from outside: wall and CPU time of a subprocess, and the resident memory of a process
tree, polled while it runs."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from crawlbench.common import REPO, BenchError

POLL_S = 0.02


@dataclass
class ProcessStats:
    """How a monitored subprocess ran."""

    returncode: int
    wall_s: float
    started_epoch: float
    ended_epoch: float
    peak_tree_rss_mb: float
    wait4_maxrss_mb: float  # inflated: Linux counts the forked, pre-exec image of this (large) process
    cpu_s: float
    rss_samples: list[tuple[float, int]] = field(default_factory=list)  # (epoch, tree RSS bytes) every poll

    def peak_rss_mb(self, start: float, end: float) -> float | None:
        """Peak tree RSS polled between two moments (epoch seconds), e.g. while one task instance ran."""
        inside = [rss for moment, rss in self.rss_samples if start <= moment <= end]
        return max(inside) / 2**20 if inside else None


def tree_members(root: int) -> list[psutil.Process]:
    """A process and all its descendants; empty when it is gone."""
    try:
        proc = psutil.Process(root)
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(root: int) -> dict[int, int]:
    """Resident set size in bytes of a process and each of its descendants, by pid."""
    sizes: dict[int, int] = {}
    for member in tree_members(root):
        with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            sizes[member.pid] = member.memory_info().rss
    return sizes


def run_monitored(command: Sequence[str], env: dict[str, str], log_path: Path) -> ProcessStats:
    """Run ``command`` with its output in ``log_path``, polling the RSS of its process tree every 20 ms.

    ``os.wait4`` gives the child's CPU time. Its ``ru_maxrss`` is kept for reference only: Linux keeps the
    high-water mark of the image replaced by ``exec``, i.e. the fork of this benchmark process.
    """
    with log_path.open("wb") as log:
        started_epoch, started = time.time(), time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    samples: list[tuple[float, int]] = []
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError as exc:
            raise BenchError(f"lost track of {command[0]} (pid {proc.pid})") from exc
        if pid:
            break
        samples.append((time.time(), sum(tree_rss(proc.pid).values())))
        time.sleep(POLL_S)
    peak = max((rss for _, rss in samples), default=0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ProcessStats(
        returncode=proc.returncode,
        wall_s=wall,
        started_epoch=started_epoch,
        ended_epoch=started_epoch + wall,
        peak_tree_rss_mb=peak / 2**20,
        wait4_maxrss_mb=usage.ru_maxrss / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
        rss_samples=samples,
    )


@dataclass
class TreeMemory:
    """Peak RSS per process of a process tree, sampled while a run is in progress.

    ``peak_total`` sums RSS over the tree and so counts the pages that forked LocalExecutor workers share
    with the scheduler once per process: an upper bound, not a measurement; per-pid peaks are meaningful.
    """

    root: int
    per_pid: dict[int, int] = field(default_factory=dict)
    peak_total: int = 0

    def sample(self) -> None:
        sizes = tree_rss(self.root)
        for pid, rss in sizes.items():
            self.per_pid[pid] = max(self.per_pid.get(pid, 0), rss)
        self.peak_total = max(self.peak_total, sum(sizes.values()))
