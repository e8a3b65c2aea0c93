"""The child process of ``isolation: process``: calls the user function on the rows its parent sends.

``python -m crawler_ops.executor.udf_child FUNCTION STYLE NAMES_JSON READ_FD WRITE_FD``. Frames on the two pipes are a
4-byte big-endian length and a pickle. The child first answers with the load result (None, or the error
text), then, for each ``(values, row_id)`` it reads, with the row's outcome (None or the error text). It
exits when its parent goes away, so a killed worker never leaves a call running behind it.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
import threading
import time
from typing import IO, Any

from crawler_ops.executor.udf import FunctionLoadError, call, load_function

HEADER = struct.Struct(">I")
PARENT_CHECK_S = 0.5


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


def exit_with_parent(parent: int) -> None:
    """Stop this process as soon as the parent that started it is gone (the child is re-parented)."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


def main(argv: list[str]) -> int:
    path, style, names_json, read_fd, write_fd = argv
    threading.Thread(target=exit_with_parent, args=(os.getppid(),), daemon=True).start()
    names = json.loads(names_json)
    with os.fdopen(int(read_fd), "rb") as inbox, os.fdopen(int(write_fd), "wb") as outbox:
        try:
            function = load_function(path)
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
