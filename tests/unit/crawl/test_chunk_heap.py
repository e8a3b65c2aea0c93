"""The chunk's frozen heap is undone when the chunk ends: a crawl leaves the garbage collector as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from crawler_ops.crawl.chunk import frozen_heap
from crawler_ops.errors import DeliveryError
from tests.unit.crawl.test_chunk import Events, MemoryLedger, RecordingPublisher, Source, make_crawler


@pytest.fixture
def thawed() -> Iterator[None]:
    """A heap nothing froze, and the one found given back afterwards."""
    before = gc.get_freeze_count()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if before:
        gc.freeze()


def test_a_crawl_freezes_the_heap_while_it_runs_and_gives_it_back_when_it_ends(thawed):
    events = Events()
    seen: list[int] = []

    class Watching(RecordingPublisher):
        def send(self, *args: object, **kwargs: object) -> object:
            seen.append(gc.get_freeze_count())
            return super().send(*args, **kwargs)

    make_crawler(Source(), MemoryLedger(events), Watching(events)).crawl()

    assert seen and min(seen) > 0, "the heap was frozen while the chunk ran"
    assert gc.get_freeze_count() == 0, "and given back to the collector at the end"


def test_a_crawl_that_fails_gives_the_heap_back_too(thawed):
    events = Events()

    with pytest.raises(DeliveryError, match="broker said no"):
        make_crawler(Source(), MemoryLedger(events), RecordingPublisher(events, fail_on=800)).crawl()

    assert gc.get_freeze_count() == 0


def test_chunks_at_once_share_the_freeze_and_the_last_one_undoes_it(thawed):
    with frozen_heap():
        with frozen_heap():
            pass
        assert gc.get_freeze_count() > 0, "still frozen for the chunk that runs on"
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_before_is_left_to_whoever_froze_it(thawed):
    gc.freeze()
    with frozen_heap():
        pass
    assert gc.get_freeze_count() > 0
