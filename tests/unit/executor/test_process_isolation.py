"""``isolation: process`` on real child processes: a timed-out call takes its whole process group with it, a
killed worker takes its child group with it (even a child busy in C), and a child's memory is capped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.executor.calls import ProcessCaller
from crawler_ops.hooks.store.status_table import ClaimedRow
from tests.waiting import wait_until

FUNCTIONS = "tests.unit.executor.child_functions"
REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups as Linux has them")


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[0] != "Z"


def state(pid: int) -> str:
    """The process's state letter (R running, S sleeping, Z zombie...); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


class HangingCall:
    """A call of ``function`` under way in a thread, once the function has forked its grandchild."""

    def __init__(self, function: str, folder: Path) -> None:
        self.caller = ProcessCaller(f"{FUNCTIONS}.{function}", "dict", ("id", "path"))
        self.caller.start()
        assert self.caller.proc is not None
        self.child = self.caller.proc.pid
        pid_file = folder / "grandchild"
        self.outcome: list[str | None] = []
        row = ClaimedRow(1, True, (1, str(pid_file)))
        self.thread = threading.Thread(target=lambda: self.outcome.append(self.caller.call(row)))
        self.thread.start()
        wait_until(pid_file.exists, 30, "the function to fork its grandchild")
        self.grandchild = int(pid_file.read_text())


def test_a_timed_out_call_kills_the_childs_whole_group_and_the_worker_moves_on_at_once(tmp_path):
    hanging = HangingCall("fork_then_hang", tmp_path)
    caller, child, call, outcome, grandchild = (
        hanging.caller,
        hanging.child,
        hanging.thread,
        hanging.outcome,
        hanging.grandchild,
    )
    assert os.getpgid(child) == child, "the child leads a process group of its own"
    assert os.getpgid(grandchild) == child

    caller.abort()  # what the worker does when the call outlives timeout_s
    wait_until(lambda: not call.is_alive(), 30, "the worker to get the call back after the kill")

    assert outcome and outcome[0] is not None and "ended during the call" in outcome[0]
    wait_until(lambda: not alive(grandchild), 30, "the forked grandchild to be killed with its group")
    wait_until(lambda: not group_members(child), 30, "no process of the child's group to be left")
    caller.close()


@pytest.mark.parametrize(
    "function", ["fork_then_spin_in_c", "fork_then_hang"], ids=["busy-in-c-holding-the-gil", "sleeping"]
)
def test_a_killed_worker_takes_its_child_group_with_it_even_a_child_busy_in_c(tmp_path, function):
    pid_file = tmp_path / "grandchild"
    child = 0
    script = "tests.unit.executor.executor_worker_with_a_child"
    worker = subprocess.Popen(
        [sys.executable, "-m", script, f"{FUNCTIONS}.{function}", str(pid_file)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        child = int(worker.stdout.readline())
        wait_until(pid_file.exists, 30, "the function to fork its grandchild")
        grandchild = int(pid_file.read_text())
        busy = "R" if function == "fork_then_spin_in_c" else "S"
        wait_until(lambda: state(child) == busy, 30, f"the call under way in the child (state {busy})")

        worker.kill()
        worker.wait()

        wait_until(lambda: not alive(child), 30, "the child to die with its worker")
        wait_until(lambda: not alive(grandchild), 30, "its forked grandchild to die with it")
        wait_until(lambda: not group_members(child), 30, "no process of the child's group to be left")
    finally:
        worker.kill()
        if child and group_members(child):
            os.killpg(child, signal.SIGKILL)  # tidy up after a failed assertion


def test_a_call_allocating_past_child_memory_mb_fails_its_row_and_the_child_goes_on():
    caller = ProcessCaller(f"{FUNCTIONS}.allocate_mb", "dict", ("id",), memory_mb=256)
    try:
        caller.start()
        error = caller.call(ClaimedRow(1024, True, (1024,)))
        assert error is not None
        assert error.startswith("MemoryError: ") and "child_memory_mb" in error and "256" in error
        assert caller.call(ClaimedRow(16, True, (16,))) is None, "the same child runs the next row"
    finally:
        caller.close()


def test_without_a_limit_the_child_allocates_freely():
    caller = ProcessCaller(f"{FUNCTIONS}.allocate_mb", "dict", ("id",))
    try:
        assert caller.call(ClaimedRow(300, True, (300,))) is None
    finally:
        caller.close()


def test_child_memory_mb_is_an_executor_field_with_a_floor():
    base = {"name": "ex", "source_table": "s", "status_table": "t", "output_fields": ["id"], "function": "m.f"}
    assert ExecutorTaskConfig.model_validate(base).child_memory_mb is None
    assert ExecutorTaskConfig.model_validate({**base, "child_memory_mb": 512}).child_memory_mb == 512
    with pytest.raises(ValueError, match="child_memory_mb"):
        ExecutorTaskConfig.model_validate({**base, "child_memory_mb": 8})


@pytest.mark.parametrize("function", ["setsid_then_hang", "double_fork_setsid_then_hang"])
def test_a_grandchild_that_leaves_the_group_dies_with_a_timed_out_call_and_does_not_hold_the_worker(tmp_path, function):
    hanging = HangingCall(function, tmp_path)
    assert os.getpgid(hanging.grandchild) != hanging.child, "it left the child's group"

    hanging.caller.abort()
    hanging.thread.join(10)

    assert not hanging.thread.is_alive(), "the worker got the call back at once: nothing holds its pipe"
    assert hanging.outcome and hanging.outcome[0] is not None and "ended during the call" in hanging.outcome[0]
    wait_until(lambda: not alive(hanging.grandchild), 30, "the grandchild outside the group to be killed too")
    hanging.caller.close()
