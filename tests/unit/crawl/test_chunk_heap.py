"""The chunk's heap: its frozen heap is undone when the chunk ends (a crawl leaves the garbage collector as it found
it), and glibc's malloc is told to keep the memory the chunk's pages free for the next pages."""

from __future__ import annotations

import gc
import platform
from collections.abc import Iterator

import pytest

from crawler_ops.crawl import heap
from crawler_ops.crawl.heap import (
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    MMAP_THRESHOLD_BYTES,
    TRIM_THRESHOLD_BYTES,
    frozen_heap,
)
from crawler_ops.errors import DeliveryError
from tests.unit.crawl.test_chunk import Events, MemoryLedger, RecordingPublisher, Source, make_crawler


@pytest.fixture
def thawed() -> Iterator[None]:
    """A heap nothing froze, with Python's default thresholds, and the one found given back afterwards."""
    before, thresholds = gc.get_freeze_count(), gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    if before:
        gc.freeze()


def test_a_crawl_freezes_the_heap_while_it_runs_and_gives_it_back_when_it_ends(thawed):
    events = Events()
    seen: list[tuple[int, tuple[int, int, int]]] = []

    class Watching(RecordingPublisher):
        def send(self, *args: object, **kwargs: object) -> object:
            seen.append((gc.get_freeze_count(), gc.get_threshold()))
            return super().send(*args, **kwargs)

    make_crawler(Source(), MemoryLedger(events), Watching(events)).crawl()

    assert seen and min(frozen for frozen, _ in seen) > 0, "the heap was frozen while the chunk ran"
    assert {thresholds for _, thresholds in seen} == {(heap.YOUNG_THRESHOLD, 10, 10)}, "young objects collected later"
    assert gc.get_freeze_count() == 0, "and given back to the collector at the end"
    assert gc.get_threshold() == (700, 10, 10), "with its thresholds"


def test_a_crawl_that_fails_gives_the_heap_back_too(thawed):
    events = Events()

    with pytest.raises(DeliveryError, match="broker said no"):
        make_crawler(Source(), MemoryLedger(events), RecordingPublisher(events, fail_on=800)).crawl()

    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)


def test_chunks_at_once_share_the_freeze_and_the_last_one_undoes_it(thawed):
    with frozen_heap():
        with frozen_heap():
            pass
        assert gc.get_freeze_count() > 0, "still frozen for the chunk that runs on"
        assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD, "and its young objects still collected later"
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)


def test_a_collector_turned_off_stays_off_and_a_higher_threshold_stays_as_set(thawed):
    gc.set_threshold(0, 10, 10)
    with frozen_heap():
        assert gc.get_threshold() == (0, 10, 10)
    gc.set_threshold(100_000, 5, 5)
    with frozen_heap():
        assert gc.get_threshold() == (100_000, 5, 5)
    assert gc.get_threshold() == (100_000, 5, 5)


def test_a_heap_frozen_before_is_left_to_whoever_froze_it(thawed):
    gc.freeze()
    with frozen_heap():
        pass
    assert gc.get_freeze_count() > 0


def test_a_crawl_has_malloc_keep_the_memory_its_pages_free(monkeypatch):
    asked: list[bool] = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: asked.append(True) or True)

    make_crawler(Source(), MemoryLedger(Events()), RecordingPublisher(Events())).crawl()

    assert asked == [True]


class Libc:
    """``mallopt`` as glibc answers it (1: done, or ``answer``), recording the settings asked for."""

    def __init__(self, answer: int = 1) -> None:
        self.answer = answer
        self.settings: list[tuple[int, int]] = []

    def mallopt(self, parameter: int, value: int) -> int:
        self.settings.append((parameter, value))
        return self.answer


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a process no chunk ran in yet."""
    monkeypatch.setattr(heap, "_kept", False)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")
def test_malloc_is_told_both_thresholds_once(monkeypatch, unset):
    libc = Libc()
    monkeypatch.setattr(heap.ctypes, "CDLL", lambda name: libc)

    assert heap.keep_freed_memory()
    assert heap.keep_freed_memory()
    assert libc.settings == [(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES), (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)]


def test_a_c_library_other_than_glibc_is_left_alone(monkeypatch, unset):
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("musl", "1.2"))
    monkeypatch.setattr(heap.ctypes, "CDLL", lambda name: pytest.fail("no C library is loaded"))

    assert not heap.keep_freed_memory()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")
def test_a_refused_setting_is_reported_and_asked_again_next_time(monkeypatch, unset, caplog):
    refusing = Libc(answer=0)
    monkeypatch.setattr(heap.ctypes, "CDLL", lambda name: refusing)

    assert not heap.keep_freed_memory()
    assert not heap.keep_freed_memory()
    assert len(refusing.settings) == 2, "asked again"
    assert "malloc refused" in caplog.text


def test_the_real_malloc_takes_the_settings(unset):
    assert heap.keep_freed_memory() == (platform.libc_ver()[0] == "glibc")
