"""Where the user function runs: in the worker's runner thread, or in a child process (``isolation: process``).

The runner thread takes rows from the :class:`~crawler_ops.executor.leases.LeaseBook` one at a time and
calls the function through a caller. A call that outlives ``timeout_s`` is abandoned by the coordinator: a
thread cannot be stopped, so it runs on unobserved; a child process is killed with its whole process group.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
from typing import IO, Protocol

from crawler_ops.config import ExecutorTaskConfig
from crawler_ops.errors import ConfigError
from crawler_ops.executor import udf
from crawler_ops.executor.leases import LeaseBook
from crawler_ops.executor.process_tree import kill_tree
from crawler_ops.executor.udf_child import read_frame, write_frame
from crawler_ops.hooks.store.status_table import ClaimedRow

log = logging.getLogger(__name__)
STOP_WAIT_S = 2.0


def load_function(cfg: ExecutorTaskConfig) -> udf.UserFunction:
    """The executor's function, imported; a config error naming the executor when it cannot be used."""
    try:
        return udf.load_function(cfg.function)
    except udf.FunctionLoadError as exc:
        raise ConfigError(f"executor '{cfg.name}': {exc}") from exc


class Caller(Protocol):
    def prepare(self) -> None: ...

    def call(self, row: ClaimedRow) -> str | None: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class ThreadCaller:
    """Calls the function in the calling thread.

    :param function: the user function.
    :param style: ``dict`` or ``legacy``.
    :param names: the output field names, in order.
    """

    def __init__(self, function: udf.UserFunction, style: udf.Style, names: tuple[str, ...]) -> None:
        self.function, self.style, self.names = function, style, names

    def prepare(self) -> None:
        """Nothing to set up."""

    def call(self, row: ClaimedRow) -> str | None:
        return udf.call(self.function, self.style, self.names, row.values, row.id)

    def abort(self) -> None:
        """Nothing to stop: an abandoned thread finishes its call unobserved."""

    def close(self) -> None:
        pass


class ProcessCaller:
    """Calls the function in a child process (``crawler_ops.executor.udf_child``), one call at a time.

    The child is started by :meth:`start` or :meth:`prepare`, and again after it died or was killed; it loads
    the function once and calls it for each row it is sent. It leads a process group of its own, which is what
    :meth:`abort` kills; the group's keeper (see ``udf_child``) kills it when this caller closes the lifeline or
    the worker dies.

    :param path: dotted path of the function.
    :param style: ``dict`` or ``legacy``.
    :param names: the output field names, in order.
    :param memory_mb: the child's address-space limit in MB (``child_memory_mb``); None: no limit.
    """

    def __init__(self, path: str, style: udf.Style, names: tuple[str, ...], memory_mb: int | None = None) -> None:
        self.path, self.style, self.names, self.memory_mb = path, style, names, memory_mb
        self.proc: subprocess.Popen[bytes] | None = None
        self.outbox: IO[bytes] | None = None
        self.inbox: IO[bytes] | None = None
        self.lifeline: int | None = None

    @classmethod
    def for_executor(cls, cfg: ExecutorTaskConfig, names: tuple[str, ...]) -> ProcessCaller:
        """The caller of an executor's configuration."""
        return cls(cfg.function, cfg.function_style, names, cfg.child_memory_mb)

    def start(self) -> None:
        """Start the child and wait until it loaded the function.

        :raises udf.FunctionLoadError: the child could not import the function.
        """
        child_reads, parent_writes = os.pipe()
        parent_reads, child_writes = os.pipe()
        # The write end stays with this process alone (pipes are not inherited by other children): it closes
        # when the caller closes it or the worker dies, however the worker dies.
        keeper_reads, self.lifeline = os.pipe()
        search_path = os.pathsep.join(p or os.getcwd() for p in sys.path)
        args = [sys.executable, "-m", "crawler_ops.executor.udf_child", self.path, self.style, json.dumps(self.names)]
        fds = (child_reads, child_writes, keeper_reads)
        self.proc = subprocess.Popen(
            [*args, *map(str, fds), str(self.memory_mb or 0)],
            pass_fds=fds,
            env={**os.environ, "PYTHONPATH": search_path, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for fd in fds:
            os.close(fd)
        self.outbox, self.inbox = os.fdopen(parent_writes, "wb"), os.fdopen(parent_reads, "rb")
        try:
            problem = read_frame(self.inbox)
        except EOFError:
            problem = f"the child process for '{self.path}' exited with code {self.proc.wait()} while starting"
        if problem is not None:
            self.stop()
            raise udf.FunctionLoadError(problem)

    def prepare(self) -> None:
        """Start the child before a row is taken, so its start-up does not count against the row's timeout (a
        child that cannot start is reported on the next row instead)."""
        if self.proc is None:
            try:
                self.start()
            except udf.FunctionLoadError as exc:
                log.warning("the child process for '%s' did not start: %s", self.path, exc)

    def call(self, row: ClaimedRow) -> str | None:
        try:
            if self.proc is None:
                self.start()
            assert self.outbox is not None and self.inbox is not None
            write_frame(self.outbox, (row.values, row.id))
            return read_frame(self.inbox)  # type: ignore[no-any-return]
        except udf.FunctionLoadError as exc:
            return f"row {row.id}: a new child process could not load the function: {exc}"
        except (EOFError, OSError, pickle.PickleError) as exc:
            code = self.stop()
            how = f"{ended(code)} ({type(exc).__name__})"
            return f"row {row.id}: the child process running the function ended during the call: it {how}"

    def abort(self) -> None:
        """Kill the child's processes (its call outlived the timeout or lost its lease): the child and whatever it
        forked, in its group or not (:func:`~crawler_ops.executor.process_tree.kill_tree`), which could otherwise
        hold the call's pipe open."""
        if self.proc is not None:
            kill_tree(self.proc.pid)

    def close(self) -> None:
        self.stop()

    def stop(self) -> int | None:
        """Close the child's pipes, so it exits on its own (killed if it does not within a moment), then the
        lifeline, so the group's keeper kills what the child left behind; returns the child's exit code."""
        proc, self.proc = self.proc, None
        for stream in (self.outbox, self.inbox):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    log.debug("closing a pipe of a child that already exited")
        self.outbox = self.inbox = None
        try:
            return None if proc is None else self.wait(proc)
        finally:
            if self.lifeline is not None:
                os.close(self.lifeline)
                self.lifeline = None

    @staticmethod
    def wait(proc: subprocess.Popen[bytes]) -> int:
        try:
            return proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            return proc.wait()


def ended(code: int | None) -> str:
    """How a child process ended, from its exit code (negative: the signal that killed it)."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with exit code {code}"


def run_calls(book: LeaseBook, generation: int, caller: Caller) -> None:
    """The runner thread: call the function on each row the book hands out, until stopped or abandoned."""
    try:
        while True:
            caller.prepare()
            row = book.next_row(generation)
            if row is None:
                return
            error = caller.call(row) if row.exists else f"source row {row.id} no longer exists"
            if not book.finish(generation, row, error):
                return
    except BaseException as exc:  # noqa: BLE001 - handed to the coordinator, which fails the worker with it
        book.handoff.crashed(exc)
