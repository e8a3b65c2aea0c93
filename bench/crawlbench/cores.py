"""The demo source on a core of its own (``--pin-source``): what the crawler reaches when it does not share its
cores with the source it reads, as it would not in production. Kafka and PostgreSQL still share the machine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crawlbench.common import BenchError
from crawlbench.environment import devstack


def threads_of(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


@contextmanager
def source_on_own_core(enabled: bool) -> Iterator[str]:
    """With ``enabled``: every thread of the demo source on the last core this process may use, this process (and
    what it starts from now on: the old loop, ``airflow dags test``) on the others; restored afterwards. Yields
    the sentence the report prints about it ("" when not enabled)."""
    if not enabled:
        yield ""
        return
    cores = sorted(os.sched_getaffinity(0))
    pid = devstack.running_pid("source")
    if len(cores) < 2 or pid is None:
        raise BenchError("--pin-source needs two cores and the stack's demo source running (`dev/stack.py up`)")
    own, source_core = set(cores[:-1]), {cores[-1]}
    before = {tid: os.sched_getaffinity(tid) for tid in threads_of(pid)}
    mine = os.sched_getaffinity(0)
    try:
        for tid in before:
            os.sched_setaffinity(tid, source_core)
        os.sched_setaffinity(0, own)
        yield (
            f"Pinned (--pin-source): the demo source (pid {pid}, {len(before)} threads) on core {cores[-1]}, the "
            f"crawler and the old loop on {sorted(own)}; Kafka and PostgreSQL on any core."
        )
    finally:
        os.sched_setaffinity(0, mine)
        for tid in threads_of(pid) if Path(f"/proc/{pid}").exists() else ():
            os.sched_setaffinity(tid, before.get(tid, mine))
