"""Whether a page's records are UTF-8, checked in a helper process beside the chunk's.

A record published as the source sent it skips the decode that would check its text, and a consumer cannot read a
value that is not UTF-8, so each such record is checked before it is published. For text in Chinese that check costs
about 4 ms of CPU a page of 1,000 records, a sixth of what the chunk process spends on the page, all of it holding
the GIL. A :class:`Utf8Checker` runs it in a helper process instead (``utf8_child.py``, on the other core): the
fetch thread has the kernel copy the page's records into a memory file the helper shares, and waits, without the
GIL, for the helper's answer. A page found UTF-8 is marked (:attr:`~crawler_ops.records.Page.utf8_checked`) and its
records are not checked again while it is filtered. Any other page is checked record by record, as without a
helper, which names the record and the field: one with an invalid byte, and one the helper could not check (it did
not start, died, or did not answer in time; then it is stopped and the chunk goes on without it).
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crawler_ops.records import Page

log = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("utf8_child.py")
#: Buffers one ``pwritev`` call may take.
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
#: The memory file keeps up to this many bytes between pages.
KEEP_BYTES = 8 * 1024 * 1024
#: How long an answer may take: a base, plus the time to check at 20 MB/s (the helper checks 500 MB/s and more).
ANSWER_BASE_S = 10.0
ANSWER_BYTES_PER_S = 20 * 1024 * 1024


class HelperError(Exception):
    """The helper did not answer as it should."""


class Utf8Checker:
    """The helper process of one chunk and the memory file it reads; a context manager that stops it.

    Thread-safe: the chunk's fetch threads take turns (one page in the memory file at a time).

    :param task_label: the crawl task id, for the log.
    """

    def __init__(self, task_label: str) -> None:
        self.task_label = task_label
        self._lock = threading.Lock()
        self._stopped = False
        self._memfd = -1
        self._proc: subprocess.Popen[bytes] | None = None
        if not hasattr(os, "memfd_create"):  # Linux only
            self._stop("this system has no memory files (os.memfd_create)")
            return
        try:
            self._memfd = os.memfd_create("crawler_ops-utf8-check", os.MFD_CLOEXEC)
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(CHILD), str(self._memfd)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(self._memfd,),
            )
        except OSError as exc:
            self._stop(f"could not start it: {exc}")

    def __enter__(self) -> Utf8Checker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._proc is not None

    def mark(self, page: Any) -> None:
        """Mark ``page`` (a :class:`Page` of raw records) checked when the helper finds every record UTF-8."""
        if isinstance(page, Page) and page and self.all_utf8(page):
            page.utf8_checked = True

    def all_utf8(self, records: Sequence[Any]) -> bool:
        """Whether every record (a bytes-like object) is UTF-8; False also when the helper could not tell."""
        with self._lock:
            if self._proc is None:
                return False
            try:
                return self._ask(records)
            except (OSError, ValueError, TypeError, HelperError) as exc:
                self._stop(f"{type(exc).__name__}: {exc}")
                return False

    def _ask(self, records: Sequence[Any]) -> bool:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        size = write_all(self._memfd, records)
        self._proc.stdin.write(size.to_bytes(8, "big"))
        self._proc.stdin.flush()
        answer_fd = self._proc.stdout.fileno()
        allowed_s = ANSWER_BASE_S + size / ANSWER_BYTES_PER_S
        ready, _, _ = select.select([answer_fd], [], [], allowed_s)
        if not ready:
            raise HelperError(f"no answer within {allowed_s:.0f}s")
        answer = os.read(answer_fd, 1)
        if size > KEEP_BYTES:
            # The file keeps the largest page written so far, which the next pages reuse (allocating its memory
            # anew for each page would cost three times the copy); a large one is given back at once.
            os.ftruncate(self._memfd, 0)
        if answer not in (b"0", b"1"):
            raise HelperError(f"it ended (exit status {self._proc.poll()})" if not answer else f"it said {answer!r}")
        return answer == b"1"

    def _stop(self, why: str) -> None:
        """Stop the helper for good: pages are checked record by record from now on."""
        if not self._stopped:
            self._stopped = True
            log.warning(
                "task %s: the UTF-8 check's helper process stopped (%s); records are checked in the chunk's process",
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


def write_all(fd: int, records: Sequence[Any]) -> int:
    """Write ``records`` one after the other from the start of ``fd``; the bytes written.

    Every record is a whole JSON value, which begins and ends with an ASCII character, so a multi-byte sequence cut at
    one record's end cannot be completed by the next record: the records together are UTF-8 exactly when each is."""
    offset = 0
    for start in range(0, len(records), IOV_MAX):
        group = records[start : start + IOV_MAX]
        expected = sum(map(len, group))
        written = os.pwritev(fd, group, offset)
        if written != expected:
            raise HelperError(f"wrote {written} of {expected} bytes to the memory file")
        offset += written
    return offset
