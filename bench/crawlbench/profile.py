"""A ``dags test`` run under py-spy (a sampling profiler: the run goes at nearly its own speed) and the top of
its profile: where the CPU of the chunk's threads goes."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crawlbench.common import BenchError

RATE_HZ = 250
# Frames of the crawl_chunk step: its loop and its fetch threads.
CHUNK_FRAMES = ("crawler_ops/crawl/chunk.py", "crawler_ops/hooks/source/hook.py")


def profiled(command: Sequence[str], output: Path) -> list[str]:
    """``command`` run by ``py-spy record``, every thread's stacks counted in ``output`` (collapsed format)."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise BenchError("--profile needs py-spy (pip install -r requirements.txt)")
    return [spy, "record", "--rate", str(RATE_HZ), "--format", "raw", "--threads", "-o", str(output), "--", *command]


def read_stacks(path: Path) -> Counter[tuple[str, ...]]:
    """Samples per stack (root first) of a py-spy collapsed file."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks[tuple(frames.split(";"))] += int(count)
    return stacks


def chunk_profile(path: Path, top: int = 15) -> dict[str, Any]:
    """The chunk's samples: the functions where they were taken (self) and our functions they passed through
    (inclusive), as shares of all the chunk's samples."""
    stacks = {s: n for s, n in read_stacks(path).items() if any(m in f for f in s for m in CHUNK_FRAMES)}
    total = sum(stacks.values())
    if not total:
        return {"samples": 0, "self": [], "inclusive": [], "run": run_shares(path)}
    own: Counter[str] = Counter()
    through: Counter[str] = Counter()
    for stack, count in stacks.items():
        own[short(stack[-1])] += count
        for frame in {short(f) for f in stack if "crawler_ops/" in f}:
            through[frame] += count
    return {
        "samples": total,
        "run": run_shares(path),
        "rate_hz": RATE_HZ,
        "self": [(name, n / total) for name, n in own.most_common(top)],
        "inclusive": [(name, n / total) for name, n in through.most_common(top)],
    }


# Where a whole ``dags test`` run's samples go, by what their stack passes through (first match wins).
RUN_PARTS = (
    ("Airflow's in-process Execution API building its versioned routes (Cadwyn)", "cadwyn/"),
    ("the crawl_chunk step", "crawler_ops/crawl/chunk.py"),
    ("imports", "_find_and_load"),
    ("the other steps (plan, commit) and the DAG's build", "crawler_ops/"),
)


def run_shares(path: Path) -> list[tuple[str, float]]:
    """Shares of all the run's samples (every thread) by :data:`RUN_PARTS`, the rest as Airflow's other work."""
    stacks = read_stacks(path)
    total = sum(stacks.values()) or 1
    shares: dict[str, int] = dict.fromkeys([name for name, _ in RUN_PARTS] + ["everything else"], 0)
    for stack, count in stacks.items():
        part = next((name for name, marker in RUN_PARTS if any(marker in f for f in stack)), "everything else")
        shares[part] += count
    return [(name, n / total) for name, n in shares.items()]


def short(frame: str) -> str:
    """``func (path/to/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('site-packages/', 1)[-1].rsplit('plugins/', 1)[-1]}"
