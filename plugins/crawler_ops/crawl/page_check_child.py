"""The helper process of :mod:`crawler_ops.crawl.page_check`: whether a page's records are UTF-8, and the fields of
each record the filter reads; given a page's whole body, also where each record lies in it.

``python -I -S page_check_child.py MEMFD FIELDS MSGSPEC_DIR RECORDS_PATH``: ``FIELDS`` is a JSON list of field names
(none: only the UTF-8 check), ``MSGSPEC_DIR`` the folder msgspec is installed in, ``RECORDS_PATH`` the dotted path of
the records list in a page's body. Each request on stdin is a kind (``a`` or ``b``), an 8-byte big-endian size and an
8-byte most records (0: any number); the helper reads that many bytes from the start of the memory file ``MEMFD``:

- ``a``: a JSON array of the page's records. The answer's payload is the records' fields, as a msgpack array of one
  array per record (none unless all are UTF-8).
- ``b``: a page's body. The answer's payload is a msgpack array of three: where each record starts in the body, where
  each ends (arrays of integers), then the records' fields as for ``a`` (nil without fields, or when some record is not
  UTF-8 or not an object, or a value does not fit msgpack). None when the body has no records list at the path or
  more records than the most: reading it stops at the record after the most, as the parent's own decode does.

It answers nine bytes on stdout: ``1`` (all records UTF-8) or ``0`` (not), then the size of the payload it wrote to the
memory file right after what it read (0: none, or msgspec did not import). It ends when stdin closes (its parent closed
it, or died). It imports only the standard library and msgspec: it starts in milliseconds and holds nothing of its
parent's.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from itertools import accumulate
from typing import Any

SIZE_BYTES = 8
#: A request: its kind, the size of what it asks about, the most records a body may hold.
REQUEST_BYTES = 1 + 2 * SIZE_BYTES


def read_exact(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd``; fewer only at the end of the stream."""
    data = b""
    while len(data) < size:
        part = os.read(fd, size - len(data))
        if not part:
            break
        data += part
    return data


def is_utf8(data: bytes | memoryview) -> bool:
    try:
        codecs.utf_8_decode(data, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


def import_msgspec(msgspec_dir: str) -> Any:
    sys.path.append(msgspec_dir)
    try:
        import msgspec
    except ImportError:
        return None
    return msgspec


def steps(records_path: str) -> list[str]:
    """The keys of ``records_path`` (none: the body is the list)."""
    return records_path.split(".") if records_path else []


def envelope(msgspec: Any, records_path: str, node: Any) -> Any:
    """The type of a page's body down to ``records_path``, its records list of ``node``: as the parent's
    ``crawler_ops.hooks.source.responses.envelope_decoder`` builds it (other keys skipped, each level's value in
    ``v``)."""
    for depth, step in enumerate(reversed(steps(records_path))):
        node = msgspec.defstruct(f"PageLevel{depth}", [("v", node)], rename={"v": step})
    return node


def unwrap(document: Any, records_path: str) -> Any:
    for _ in steps(records_path):
        document = document.v
    return document


class Reader:
    """Answers requests: the fields of each record (none without ``fields``) and, for a body, where each record lies.

    A record's fields are read as :func:`crawler_ops.message.pages.head_struct` reads them (absent ones None),
    which the tests compare."""

    def __init__(self, msgspec: Any, fields: list[str], records_path: str) -> None:
        self.msgspec, self.records_path = msgspec, records_path
        self.encode, self.astuple = msgspec.msgpack.Encoder().encode, msgspec.structs.astuple
        head: Any = None
        if fields:
            attrs: list[Any] = [(f"f{i}", Any, None) for i in range(len(fields))]
            head = msgspec.defstruct("RecordHead", attrs, rename={f"f{i}": name for i, name in enumerate(fields)})
        self.heads_of_array = msgspec.json.Decoder(list[head]).decode if head is not None else None
        self.heads_of_body = msgspec.json.Decoder(envelope(msgspec, records_path, list[head])).decode if head else None
        self.records_of_body: dict[int, Any] = {}  # by the most records (0: any number)

    def records(self, data: bytes, most: int) -> list[Any]:
        """The records of a body as raw JSON; more than ``most`` (unless 0) raise as soon as the one after is read, as
        ``crawler_ops.hooks.source.responses.counted_page_decoder`` does: an array-like struct of ``most`` optional
        fields."""
        msgspec = self.msgspec
        if most not in self.records_of_body:
            node: Any = list[msgspec.Raw]  # type: ignore[name-defined]  # msgspec is imported at run time
            if most:
                fields = [(f"r{i}", msgspec.Raw, msgspec.UNSET) for i in range(most)]
                node = msgspec.defstruct(f"Records{most}", fields, array_like=True, forbid_unknown_fields=True)
            self.records_of_body[most] = msgspec.json.Decoder(envelope(msgspec, self.records_path, node)).decode
        records = unwrap(self.records_of_body[most](data), self.records_path)
        return [r for r in self.astuple(records) if r is not msgspec.UNSET] if most else records

    def array(self, data: bytes) -> tuple[bool, bytes]:
        utf8 = is_utf8(data)
        if not utf8 or self.heads_of_array is None:
            return utf8, b""
        try:
            return True, self.encode([self.astuple(record) for record in self.heads_of_array(data)])
        except Exception:  # noqa: BLE001 - any record the parent's own decode must look at names its problem there
            return True, b""

    def body(self, data: bytes, most: int) -> tuple[bool, bytes]:
        try:
            records = self.records(data, most)
        except Exception:  # noqa: BLE001 - the parent decodes the body itself and names what is wrong with it
            return False, b""
        spans = record_spans(data, records)
        if spans is None:
            return False, b""
        starts, ends = spans
        utf8 = is_utf8(memoryview(data)[starts[0] : ends[-1]]) if starts else True
        heads = None
        if utf8 and self.heads_of_body is not None:
            try:
                heads = [self.astuple(r) for r in unwrap(self.heads_of_body(data), self.records_path)]
            except Exception:  # noqa: BLE001 - a record not an object: the parent's filter names it
                heads = None
        try:
            return utf8, self.encode([starts, ends, heads])
        except Exception:  # noqa: BLE001 - a value msgpack cannot carry: the parent's filter reads the fields itself
            return utf8, self.encode([starts, ends, None])


def record_spans(data: bytes, records: list[Any]) -> tuple[list[int], list[int]] | None:
    """Where each record lies in ``data``: the starts, then the ends. Each span holds exactly the bytes of its record,
    in order, whatever the body holds before or between its records: a place where those bytes are (``find`` gives
    one) is as good as the place they were decoded from. None if one is not found, which cannot happen for records
    decoded from ``data``."""
    if not records:
        return [], []
    first = data.find(records[0])
    if first >= 0 and data.startswith(b",".join(records), first):
        # The records one comma apart, as a compact body has them: each starts right after the comma that follows
        # the one before, found for the whole page at once.
        ends = list(accumulate(map(len, records), lambda end, size: end + 1 + size, initial=first - 1))
        return [end + 1 for end in ends[:-1]], ends[1:]
    starts, ends, at = [], [], 0
    for record in records:  # whitespace between them (an indented body): each found from where the one before ended
        start = data.find(record, at)
        if start < 0:
            return None
        at = start + len(record)
        starts.append(start)
        ends.append(at)
    return starts, ends


def main(memfd: int, fields: list[str], msgspec_dir: str, records_path: str) -> int:
    msgspec = import_msgspec(msgspec_dir)
    reader = Reader(msgspec, fields, records_path) if msgspec is not None else None
    while len(request := read_exact(0, REQUEST_BYTES)) == REQUEST_BYTES:
        size, most = int.from_bytes(request[1:9], "big"), int.from_bytes(request[9:], "big")
        data = os.pread(memfd, size, 0)
        if len(data) != size:
            utf8, payload = False, b""
        elif request[:1] == b"b":
            utf8, payload = reader.body(data, most) if reader is not None else (False, b"")
        elif reader is not None:
            utf8, payload = reader.array(data)
        else:
            utf8, payload = is_utf8(data), b""
        if payload and os.pwrite(memfd, payload, size) != len(payload):
            payload = b""
        os.write(1, (b"1" if utf8 else b"0") + len(payload).to_bytes(SIZE_BYTES, "big"))
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]))
