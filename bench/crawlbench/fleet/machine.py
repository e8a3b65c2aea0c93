"""The whole machine's CPU, busy or not, from the kernel's counters in ``/proc/stat`` (every process, the stack's and
other users' included: the machine is shared).

The rule: the first line of ``/proc/stat`` holds the time all CPUs spent in each state since boot, in clock ticks:
``user nice system idle iowait irq softirq steal guest guest_nice``. Busy is ``user + nice + system + irq + softirq +
steal``; the total is busy ``+ idle + iowait`` (``guest`` and ``guest_nice`` are already counted in ``user`` and
``nice``). Between two readings, the busy share is the busy ticks over the total ticks that passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY = ("user", "nice", "system", "irq", "softirq", "steal")
NOT_BUSY = ("idle", "iowait")
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CpuStat:
    """Clock ticks all CPUs spent busy, and in all, since boot."""

    busy: int
    total: int


def parse_cpu_stat(text: str) -> CpuStat:
    """The ``cpu`` line of ``/proc/stat``'s text as busy and total ticks (a field a kernel does not report counts 0)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = dict(zip(FIELDS, (int(v) for v in parts[1:]), strict=False))
            busy = sum(ticks.get(name, 0) for name in BUSY)
            return CpuStat(busy, busy + sum(ticks.get(name, 0) for name in NOT_BUSY))
    raise ValueError("no 'cpu' line in /proc/stat")


def read_cpu_stat() -> CpuStat:
    return parse_cpu_stat(PROC_STAT.read_text())


def busy_share(before: CpuStat, after: CpuStat) -> float | None:
    """The share of the CPU time between two readings that was busy (0..1); None when no tick passed."""
    total = after.total - before.total
    return None if total <= 0 else (after.busy - before.busy) / total
