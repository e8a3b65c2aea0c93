"""A page's records checked in a helper process beside the chunk's: whether they are UTF-8, and the fields the filter
reads of each.

A record published as the source sent it skips the decode that would check its text, and a consumer cannot read a
value that is not UTF-8, so each such record is checked before it is published. For text in Chinese that check costs
about 4 ms of CPU a page of 1,000 records, and reading the fields the filter needs (the dates, the key) of each
record another 0.7-1.3 ms, all of it holding the chunk process's GIL. A :class:`PageChecker` has a helper process do
both (``page_check_child.py``, on the other core): the fetch thread has the kernel copy the page's records, as one
JSON array, into a memory file the helper shares, and waits, without the GIL, for the helper's answer. A page found
UTF-8 is marked (:attr:`~crawler_ops.records.Page.utf8_checked`) and its records are not checked again while it is
filtered; the fields come back as msgpack, which costs a sixth of reading them from the JSON. Any other page is
checked record by record, as without a helper, which names the record and the field: one with an invalid byte, one
whose fields the helper could not read (a record not an object, say), and one the helper could not check (it did
not start, died, or did not answer in time; then it is stopped and the chunk goes on without it).
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
from pathlib import Path
from typing import Any

import msgspec

from crawler_ops.records import Page

log = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("page_check_child.py")
#: Buffers one ``pwritev`` call may take.
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
#: The memory file keeps up to this many bytes between pages.
KEEP_BYTES = 8 * 1024 * 1024
#: How long an answer may take: a base, plus the time to check at 20 MB/s (the helper reads 200 MB/s and more).
ANSWER_BASE_S = 10.0
ANSWER_BYTES_PER_S = 20 * 1024 * 1024
#: The helper's answer: UTF-8 or not (one byte), then the size of the fields it wrote.
ANSWER_BYTES = 9
_read_heads = msgspec.msgpack.Decoder(list[tuple]).decode


class HelperError(Exception):
    """The helper did not answer as it should."""


class PageChecker:
    """The helper process of one chunk and the memory file it reads; a context manager that stops it.

    Thread-safe: the chunk's fetch threads take turns (one page in the memory file at a time).

    :param task_label: the crawl task id, for the log.
    :param fields: the fields of each record the helper reads (:func:`crawler_ops.records.head_fields`); none:
        it only checks UTF-8.
    """

    def __init__(self, task_label: str, fields: tuple[str, ...] = ()) -> None:
        self.task_label, self.fields = task_label, fields
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
                [sys.executable, "-I", "-S", str(CHILD), str(self._memfd), json.dumps(fields), msgspec_dir],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(self._memfd,),
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
        given the fields it read of each record when it has none."""
        if isinstance(page, Page) and page:
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
            except (OSError, ValueError, TypeError, HelperError, msgspec.DecodeError) as exc:
                self._stop(f"{type(exc).__name__}: {exc}")
                return False, None

    def _ask(self, records: Sequence[Any]) -> tuple[bool, list[tuple[Any, ...]] | None]:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        size = write_array(self._memfd, records)
        self._proc.stdin.write(size.to_bytes(8, "big"))
        self._proc.stdin.flush()
        answer = read_answer(self._proc.stdout.fileno(), ANSWER_BASE_S + size / ANSWER_BYTES_PER_S)
        if len(answer) < ANSWER_BYTES or answer[:1] not in (b"0", b"1"):
            raise HelperError(f"it ended (exit status {self._proc.poll()})" if not answer else f"it said {answer!r}")
        heads_size = int.from_bytes(answer[1:], "big")
        heads = None
        if heads_size:
            payload = os.pread(self._memfd, heads_size, size)
            heads = _read_heads(payload)
            if len(payload) != heads_size or len(heads) != len(records):
                raise HelperError(f"it read the fields of {len(heads)} records of {len(records)}")
        if size + heads_size > KEEP_BYTES:
            # The file keeps the largest page written so far, which the next pages reuse (allocating its memory
            # anew for each page would cost three times the copy); a large one is given back at once.
            os.ftruncate(self._memfd, 0)
        return answer[:1] == b"1", heads

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
