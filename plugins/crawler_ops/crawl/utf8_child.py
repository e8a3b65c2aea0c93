"""The helper process of :mod:`crawler_ops.crawl.utf8_check`: tells whether the bytes its parent wrote are UTF-8.

``python -I -S utf8_child.py MEMFD``. For each 8-byte big-endian size read from stdin, it reads that many bytes
from the start of the memory file ``MEMFD`` and answers one byte on stdout: ``1`` (all UTF-8) or ``0`` (not). It
ends when stdin closes (its parent closed it, or died). Only the standard library is imported: the process starts in
milliseconds and holds nothing of its parent's.
"""

from __future__ import annotations

import codecs
import os
import sys

SIZE_BYTES = 8


def read_exact(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd``; fewer only at the end of the stream."""
    data = b""
    while len(data) < size:
        part = os.read(fd, size - len(data))
        if not part:
            break
        data += part
    return data


def is_utf8(data: bytes) -> bool:
    try:
        codecs.utf_8_decode(data, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


def main(memfd: int) -> int:
    while len(head := read_exact(0, SIZE_BYTES)) == SIZE_BYTES:
        size = int.from_bytes(head, "big")
        data = os.pread(memfd, size, 0)
        os.write(1, b"1" if len(data) == size and is_utf8(data) else b"0")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
