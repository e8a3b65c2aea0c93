"""The child process of ``isolation: process``: calls the user function on the rows its parent sends.

``python -m crawler_ops.executor.udf_child FUNCTION STYLE NAMES_JSON READ_FD WRITE_FD LIFELINE_FD MEMORY_MB``. Frames
on the two pipes are a 4-byte big-endian length and a pickle. The child first answers with the load result (None,
or the error text), then, for each ``(values, row_id)`` it reads, with the row's outcome (None or the error text).

The child leads a process group of its own (its parent starts it in a new session), and before it imports anything
of the user's it forks a keeper: a process that runs no user code and waits on the lifeline pipe, whose write end
only the worker holds. When the worker closes it or dies, the keeper kills the whole group: the child, however busy
in C, and whatever the user function forked, also what left the group with ``setsid()`` (the child is a subreaper
of its descendants: :mod:`crawler_ops.executor.process_tree`). With ``MEMORY_MB`` > 0 the child's address space is
capped (``RLIMIT_AS``) before the function is imported; an allocation past it fails that row with a
``MemoryError``.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import signal
import struct
import sys
from typing import IO, Any

from crawler_ops.executor.process_tree import become_subreaper, kill_tree
from crawler_ops.executor.udf import FunctionLoadError, UserFunction, call, load_function

HEADER = struct.Struct(">I")


def write_frame(stream: IO[bytes], value: Any) -> None:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next frame; EOFError when the other side closed or died."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError("pipe closed")
    size = HEADER.unpack(header)[0]
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError("pipe closed mid-frame")
    return pickle.loads(payload)


def fork_keeper(lifeline: int, pipes: tuple[int, ...]) -> None:
    """Fork the keeper of this process group: it kills the group when the lifeline pipe closes (never returns in
    the keeper). It holds no end of the call pipes, so a dead child still reads as EOF to the worker."""
    child = os.getpid()
    if os.fork() != 0:
        os.close(lifeline)
        return
    try:
        for fd in pipes:
            os.close(fd)
        while os.read(lifeline, 1):
            pass  # the worker never writes: EOF when it closed its end or died
    finally:
        # The child's descendants that left its group (setsid), found while the child is alive: once it is gone
        # this process belongs to another parent, whose other descendants are none of its business.
        if os.getppid() == child:
            kill_tree(child, group=False, spare=os.getpid())
        os.killpg(0, signal.SIGKILL)
        os._exit(1)


def limit_memory(path: str, memory_mb: int) -> UserFunction:
    """Cap this process's address space at ``memory_mb``; a function whose MemoryError names the limit."""
    limit = memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    function = load_function(path)

    def limited(argument: Any) -> Any:
        try:
            return function(argument)
        except MemoryError as exc:
            raise MemoryError(f"the function went past the child's memory limit (child_memory_mb {memory_mb})") from exc

    return limited


def main(argv: list[str]) -> int:
    path, style, names_json, read_fd, write_fd, lifeline_fd, memory_mb = argv
    become_subreaper()  # what the function forks stays this process's descendant, to be found and killed
    fork_keeper(int(lifeline_fd), (int(read_fd), int(write_fd)))
    names = json.loads(names_json)
    with os.fdopen(int(read_fd), "rb") as inbox, os.fdopen(int(write_fd), "wb") as outbox:
        try:
            function = limit_memory(path, int(memory_mb)) if int(memory_mb) > 0 else load_function(path)
        except FunctionLoadError as exc:
            write_frame(outbox, str(exc))
            return 1
        write_frame(outbox, None)
        while True:
            try:
                values, row_id = read_frame(inbox)
            except EOFError:
                return 0
            write_frame(outbox, call(function, style, names, values, row_id))  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
