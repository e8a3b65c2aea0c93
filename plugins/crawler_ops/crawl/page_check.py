"""A page's records checked in a helper process beside the chunk's: whether they are UTF-8, and the fields the filter
reads of each.

A record published as the source sent it skips the decode that would check its text, and a consumer cannot read a
value that is not UTF-8, so each such record is checked before it is published. For text in Chinese that check costs
about 4 ms of CPU a page of 1,000 records, and reading the fields the filter needs (the dates, the key) of each
record another 0.7-1.3 ms, all of it holding the chunk process's GIL. A :class:`PageChecker` has a helper process do
both (``page_check_child.py``, on the other core): the fetch thread has the kernel copy the page's body into a memory
file the helper shares, and waits, without the GIL, for the helper's answer: where each record lies in the body (the
fetch thread slices the body there instead of decoding it), whether the records are UTF-8, and their fields, as
msgpack, which costs a sixth of reading them from the JSON. A page the helper could not split (not JSON, no records
at the path, more records than asked for) is decoded by the source hook, which names what is wrong; a page made of
several answers is written to the helper as one JSON array of its records, for the check and the fields only.

A page found UTF-8 is marked (:attr:`~crawler_ops.message.pages.Page.utf8_checked`) and its records are not checked
again while it is filtered. Any other page is checked record by record, as without a helper, which names the record and
the field: one with an invalid byte, one whose fields the helper could not read (a record not an object, say), and
one the helper could not check (it did not start, died, or did not answer in time; then it is stopped and the chunk
goes on without it).
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from operator import le
from pathlib import Path
from typing import Any

import msgspec

from crawler_ops.message.pages import Page

log = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("page_check_child.py")
#: Buffers one ``pwritev`` call may take.
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
#: The memory file keeps up to this many bytes between pages.
KEEP_BYTES = 8 * 1024 * 1024
#: How long an answer may take: a base, plus the time to check at 20 MB/s (the helper reads 200 MB/s and more).
ANSWER_BASE_S = 10.0
ANSWER_BYTES_PER_S = 20 * 1024 * 1024
#: The helper's answer: UTF-8 or not (one byte), then the size of the payload it wrote after what it read.
ANSWER_BYTES = 9
#: The helper's environment over its parent's: glibc's heap keeps 32 MB free at its top instead of giving memory back
#: to the system after each page. A page's body and its text decoded for the UTF-8 check take several MB, which were
#: otherwise mapped and zeroed afresh for every page: 0.8 of the 3.3 ms of CPU the helper spent a page of 1.7 MB. A
#: value the environment sets already is kept; other C libraries ignore the variable.
HELPER_ENVIRONMENT = {"MALLOC_TOP_PAD_": str(32 * 1024 * 1024)}
_read_heads = msgspec.msgpack.Decoder(list[tuple]).decode
_read_split = msgspec.msgpack.Decoder(tuple[list[int], list[int], list[tuple] | None]).decode


class HelperError(Exception):
    """The helper did not answer as it should."""


#: What asking a helper that died, hung or answered something that does not fit raises: the helper is then stopped.
HELPER_FAILURES = (OSError, ValueError, TypeError, HelperError, msgspec.DecodeError)


class PageChecker:
    """The helper process of one chunk and the memory file it reads; a context manager that stops it.

    Thread-safe: the chunk's fetch threads take turns (one page in the memory file at a time).

    :param task_label: the crawl task id, for the log.
    :param fields: the fields of each record the helper reads (:func:`crawler_ops.message.pages.head_fields`); none:
        it only checks UTF-8.
    :param records_path: where a page's body holds its records (``source.records_path``); none: the helper is given
        records only, not bodies (:meth:`split`).
    """

    def __init__(self, task_label: str, fields: tuple[str, ...] = (), records_path: str | None = None) -> None:
        self.task_label, self.fields, self.records_path = task_label, fields, records_path
        self._lock = threading.Lock()
        self._stopped = False
        self._memfd = -1
        self._proc: subprocess.Popen[bytes] | None = None
        if not hasattr(os, "memfd_create"):  # Linux only
            self._stop("this system has no memory files (os.memfd_create)")
            return
        try:
            self._memfd = os.memfd_create("crawler_ops-page-check", os.MFD_CLOEXEC)
            msgspec_dir = str(Path(msgspec.__file__).parent.parent)
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(CHILD),
                    str(self._memfd),
                    json.dumps(fields),
                    msgspec_dir,
                    records_path or "",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(self._memfd,),
                env={**HELPER_ENVIRONMENT, **os.environ},
            )
        except OSError as exc:
            self._stop(f"could not start it: {exc}")

    def __enter__(self) -> PageChecker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._proc is not None

    def checked(self, page: Any) -> Any:
        """``page`` (a :class:`Page` of raw records), marked checked when the helper found every record UTF-8, and
        given the fields it read of each record when it has none; a page :meth:`split` checked already is left as
        it is."""
        if isinstance(page, Page) and page and not (page.utf8_checked and (page.heads is not None or not self.fields)):
            utf8, heads = self.check(page)
            page.utf8_checked = utf8
            if heads is not None and page.heads is None:
                page.fields, page.heads = self.fields, heads
        return page

    def check(self, records: Sequence[Any]) -> tuple[bool, list[tuple[Any, ...]] | None]:
        """Whether every record (a bytes-like object) is UTF-8, and the fields of each (None when the helper did not
        read them); (False, None) also when the helper could not tell."""
        with self._lock:
            if self._proc is None:
                return False, None
            try:
                return self._ask(records)
            except HELPER_FAILURES as exc:
                self._stop(f"{type(exc).__name__}: {exc}")
                return False, None

    def split(self, body: bytes, most: int | None = None) -> Page | None:
        """The records of a page's ``body`` (at :attr:`records_path`), as the source hook's own decode would give them,
        checked as :meth:`checked` checks them; None when the helper could not tell, or the body holds more than
        ``most`` records (the caller decodes the body, and names what is wrong).

        The helper finds where each record lies in the body: the fetch thread writes the body in one piece and slices
        it, instead of decoding the body and writing each record on its own."""
        with self._lock:
            if self._proc is None or self.records_path is None:
                return None
            try:
                return self._split(body, most or 0)
            except HELPER_FAILURES as exc:
                self._stop(f"{type(exc).__name__}: {exc}")
                return None

    def _split(self, body: bytes, most: int) -> Page | None:
        written = os.pwrite(self._memfd, body, 0)
        if written != len(body):
            raise HelperError(f"wrote {written} of {len(body)} bytes to the memory file")
        utf8, payload = self._request(b"b", written, most)
        return page_of_spans(body, most, self.fields, utf8, payload) if payload else None

    def _ask(self, records: Sequence[Any]) -> tuple[bool, list[tuple[Any, ...]] | None]:
        utf8, payload = self._request(b"a", write_array(self._memfd, records))
        heads = None
        if payload:
            heads = _read_heads(payload)
            if len(heads) != len(records):
                raise HelperError(f"it read the fields of {len(heads)} records of {len(records)}")
        return utf8, heads

    def _request(self, kind: bytes, size: int, most: int = 0) -> tuple[bool, bytes]:
        assert self._proc is not None
        return ask_helper(self._proc, self._memfd, kind, size, most)

    def _stop(self, why: str) -> None:
        """Stop the helper for good: pages are checked record by record from now on."""
        if not self._stopped:
            self._stopped = True
            log.warning(
                "task %s: the page check's helper process stopped (%s); records are checked in the chunk's process",
                self.task_label,
                why,
            )
        self._end()

    def close(self) -> None:
        with self._lock:
            self._end()

    def _end(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()  # the helper ends when its stdin closes
            except OSError:
                pass
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._memfd >= 0:
            os.close(self._memfd)
            self._memfd = -1


def ask_helper(proc: subprocess.Popen[bytes], memfd: int, kind: bytes, size: int, most: int) -> tuple[bool, bytes]:
    """Ask the helper about the ``size`` bytes written to the memory file (``kind``: records, or a body of at most
    ``most`` records, 0: any number); whether the records are UTF-8, and the payload of its answer (b"": none)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(kind + size.to_bytes(8, "big") + most.to_bytes(8, "big"))
    proc.stdin.flush()
    answer = read_answer(proc.stdout.fileno(), ANSWER_BASE_S + size / ANSWER_BYTES_PER_S)
    if len(answer) < ANSWER_BYTES or answer[:1] not in (b"0", b"1"):
        raise HelperError(f"it ended (exit status {proc.poll()})" if not answer else f"it said {answer!r}")
    payload_size = int.from_bytes(answer[1:], "big")
    payload = os.pread(memfd, payload_size, size) if payload_size else b""
    if len(payload) != payload_size:
        raise HelperError(f"its answer holds {len(payload)} of {payload_size} bytes")
    if size + payload_size > KEEP_BYTES:
        # The file keeps the largest page written so far, which the next pages reuse (allocating its memory anew for
        # each page would cost three times the copy); a large one is given back at once.
        os.ftruncate(memfd, 0)
    return answer[:1] == b"1", payload


def page_of_spans(body: bytes, most: int, fields: tuple[str, ...], utf8: bool, payload: bytes) -> Page:
    """The page the helper's answer about ``body`` describes: each record a slice of the body (not a copy), with the
    values of ``fields`` of each when the helper read them.

    :raises HelperError: the answer does not fit the body (records out of order or outside it, more than ``most``)."""
    starts, ends, heads = _read_split(payload)
    count = len(starts)
    if most and count > most:
        raise HelperError(f"it found {count} records where at most {most} may be")
    if len(ends) != count or (heads is not None and len(heads) != count):
        raise HelperError(f"it gave {count} starts, {len(ends)} ends and the fields of {len(heads or ())} records")
    if count and not (starts[0] >= 0 and ends[-1] <= len(body) and all(map(le, starts, ends))):
        raise HelperError("it found records outside the body")
    if not all(map(le, ends[:-1], starts[1:])):
        raise HelperError("it found records out of order")
    view = memoryview(body)
    records = list(map(msgspec.Raw, map(view.__getitem__, map(slice, starts, ends))))
    return Page(records, fields if heads is not None else (), heads, utf8)


def read_answer(fd: int, allowed_s: float) -> bytes:
    """The helper's answer, read from ``fd`` within ``allowed_s``; shorter if it ended first.

    :raises HelperError: no whole answer in time.
    """
    answer = b""
    deadline = time.monotonic() + allowed_s
    while len(answer) < ANSWER_BYTES:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise HelperError(f"no answer within {allowed_s:.0f}s")
        part = os.read(fd, ANSWER_BYTES - len(answer))
        if not part:
            break
        answer += part
    return answer


def write_array(fd: int, records: Sequence[Any]) -> int:
    """Write ``records`` as one JSON array from the start of ``fd``; the bytes written.

    Every record is a whole JSON value, which begins and ends with an ASCII character, so a multi-byte sequence cut at
    one record's end cannot be completed by what follows it: the array is UTF-8 exactly when each record is."""
    parts: list[Any] = [b","] * (2 * len(records) + 1)  # [ r0 , r1 , ... ]
    parts[1::2] = records
    parts[0], parts[-1] = b"[", b"]"
    if not records:
        parts = [b"[]"]
    offset = 0
    for start in range(0, len(parts), IOV_MAX):
        group = parts[start : start + IOV_MAX]
        expected = sum(map(len, group))
        written = os.pwritev(fd, group, offset)
        if written != expected:
            raise HelperError(f"wrote {written} of {expected} bytes to the memory file")
        offset += written
    return offset
