"""The helper process of :mod:`crawler_ops.crawl.page_check`: whether a page's records are UTF-8, and the fields of
each record the filter reads.

``python -I -S page_check_child.py MEMFD FIELDS MSGSPEC_DIR``: ``FIELDS`` is a JSON list of field names (none: only
the UTF-8 check), ``MSGSPEC_DIR`` the folder msgspec is installed in. For each 8-byte big-endian size read from stdin,
it reads that many bytes from the start of the memory file ``MEMFD``: a JSON array of the page's records. It answers
nine bytes on stdout: ``1`` (all UTF-8) or ``0`` (not), then the 8-byte size of the records' fields it wrote to the
memory file right after the array, as a msgpack array of one array per record (size 0: it has none, because the page
is not UTF-8, a record is not an object, a value does not fit msgpack, or msgspec did not import). It ends when stdin
closes (its parent closed it, or died). It imports only the standard library and msgspec: it starts in milliseconds
and holds nothing of its parent's.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from collections.abc import Callable
from typing import Any

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


def fields_reader(fields: list[str], msgspec_dir: str) -> Callable[[bytes], bytes] | None:
    """Reads ``fields`` of each record of a JSON array, as msgpack (b"" when it cannot); None without fields or msgspec.

    A record's fields are read as :func:`crawler_ops.records.head_struct` reads them (absent ones None), which the
    tests compare."""
    if not fields:
        return None
    sys.path.append(msgspec_dir)
    try:
        import msgspec
    except ImportError:
        return None
    attrs: list[Any] = [(f"f{i}", Any, None) for i in range(len(fields))]
    head = msgspec.defstruct("RecordHead", attrs, rename={f"f{i}": name for i, name in enumerate(fields)})
    decode = msgspec.json.Decoder(list[head]).decode  # type: ignore[valid-type]
    encode, astuple = msgspec.msgpack.Encoder().encode, msgspec.structs.astuple

    def read(data: bytes) -> bytes:
        try:
            return encode([astuple(record) for record in decode(data)])
        except Exception:  # noqa: BLE001 - any record the parent's own decode must look at names its problem there
            return b""

    return read


def main(memfd: int, fields: list[str], msgspec_dir: str) -> int:
    read_fields = fields_reader(fields, msgspec_dir)
    while len(head := read_exact(0, SIZE_BYTES)) == SIZE_BYTES:
        size = int.from_bytes(head, "big")
        data = os.pread(memfd, size, 0)
        utf8 = len(data) == size and is_utf8(data)
        heads = read_fields(data) if read_fields is not None and utf8 else b""
        if heads and os.pwrite(memfd, heads, size) != len(heads):
            heads = b""
        os.write(1, (b"1" if utf8 else b"0") + len(heads).to_bytes(SIZE_BYTES, "big"))
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]))
