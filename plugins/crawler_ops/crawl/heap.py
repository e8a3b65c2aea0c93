"""The chunk process's heap while it crawls: the garbage collector kept off the heap that was there before and out
of the way of the pages in flight, and freed page memory kept for the next page instead of handed back to the kernel.

A page's body (1-2 MB for 1,000 records) is allocated on a fetch thread, each of which has its own malloc arena,
and freed on another thread once Kafka confirmed it. With glibc's defaults, an arena hands the free top of its heap
back to the kernel once it exceeds the trim threshold (128 KiB at first; twice the largest mapped block freed so far
after that), and the next page's body faults the same memory in again, 4 KB at a time: about 300 page faults a page
of 1,000 records. :func:`keep_freed_memory` raises that threshold and fixes the size above which a block is mapped
on its own, so the fetch threads reuse what the last pages freed. What an arena keeps is bounded by the threshold;
it goes back to the kernel when the task's process ends.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: glibc's ``mallopt`` parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Blocks up to this size come from the arenas, whose freed memory is reused: a page's body (1-2 MB for 1,000
#: records) and the pieces it is read in. A larger block (a hostile page near ``source.max_response_mb``) is mapped on
#: its own and goes back to the kernel when freed.
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
#: The free memory an arena keeps at its top before it gives the rest back to the kernel: a few pages' bodies.
TRIM_THRESHOLD_BYTES = 8 * 1024 * 1024

#: The young generation's collection threshold while a chunk runs (net allocations of tracked objects; Python's
#: default is 700). The messages of the pages in flight (a header list each, 1,000 a page) live until Kafka confirmed
#: their batch: at 700 they started a young collection every few hundred records, each going over the live messages
#: again, 4 % of the chunk's CPU. At this threshold pages come and go between collections; the rare cycle (an
#: exception kept with its traceback) still goes at the next one.
YOUNG_THRESHOLD = 20_000

_heap_lock = threading.Lock()
_heap_users = 0
_heap_ours = False
_thresholds: tuple[int, int, int] | None = None  # the collector's thresholds before the first chunk began
_kept = False


@contextmanager
def chunk_heap() -> Iterator[None]:
    """The heap a chunk crawls in: malloc keeps what pages free (:func:`keep_freed_memory`), and the objects there
    before stay out of the collector's way (:func:`frozen_heap`)."""
    keep_freed_memory()
    with frozen_heap():
        yield


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects that exist on entry out of the garbage collector's collections until the block ends, and
    collect the young generation at :data:`YOUNG_THRESHOLD` instead of Python's default.

    Airflow's heap is large by the time a chunk runs, and full collections over it stalled chunks for 0.4 s at a
    time; pages are acyclic and freed by reference counting, so the chunk loses nothing. Blocks running at once in
    one process share the freeze and the threshold: the last one to end gives the heap back to the collector, unless
    it was frozen before the first began (by its owner, who undoes it), and puts the thresholds back as they were.
    """
    global _heap_users, _heap_ours, _thresholds
    with _heap_lock:
        if _heap_users == 0:
            _heap_ours = gc.get_freeze_count() == 0
            _thresholds = gc.get_threshold()
            young, *older = _thresholds
            if young:  # 0: automatic collection is off, and stays off
                gc.set_threshold(max(young, YOUNG_THRESHOLD), *older)
        _heap_users += 1
        gc.freeze()
    try:
        yield
    finally:
        with _heap_lock:
            _heap_users -= 1
            if _heap_users == 0:
                if _heap_ours:
                    gc.unfreeze()
                if _thresholds is not None:
                    gc.set_threshold(*_thresholds)


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep up to :data:`TRIM_THRESHOLD_BYTES` of freed memory at the top of each arena for
    reuse, and map only blocks over :data:`MMAP_THRESHOLD_BYTES` on their own.

    For the rest of the process: glibc has no way to read the settings back, and the task's process is the chunk's.
    Returns whether the settings are in effect: False on a C library other than glibc, where nothing is changed.
    """
    global _kept
    with _heap_lock:
        if _kept:
            return True
        if platform.libc_ver()[0] != "glibc":
            return False
        mallopt = ctypes.CDLL(None).mallopt
        if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) != 1:
            log.warning("malloc refused the chunk's heap settings; freed page memory goes back to the kernel")
            return False
        _kept = True
        return True
