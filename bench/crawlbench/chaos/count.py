"""What reached Kafka after a chaos scenario, counted from the topic itself against the source's ground truth,
as a ``read_uncommitted`` and a ``read_committed`` consumer see it, and the batches whose records came twice."""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from confluent_kafka import Message

from crawlbench.topics import topic_keys

ISOLATIONS = ("read_uncommitted", "read_committed")


@dataclass(frozen=True)
class Tally:
    """One consumer's view of a topic against the expected records.

    :param received: messages read (copies included).
    :param missing: expected records not received.
    :param unexpected: records received that were not expected.
    :param duplicated: expected records received more than once.
    :param dup_batches: batches (by the offsets planned for them) holding a duplicated record.
    """

    received: int
    missing: int
    unexpected: int
    duplicated: int
    dup_batches: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class BatchBounds:
    """The batches planned for a crawl task, ``[lo, hi)``, as seen in its status rows while its runs went on
    (commit prunes them); maps a record's source offset to its batch."""

    def __init__(self) -> None:
        self.bounds: dict[int, int] = {}

    def poll(self, pg_uri: str, task_id: str) -> None:
        """Remember the task's current batch rows. A database that does not answer (a scenario may have stopped
        it) or has no schema yet (the first plan creates it) is asked again at the next poll: the rows live from
        plan to commit."""
        with (
            contextlib.suppress(psycopg.OperationalError, psycopg.errors.UndefinedTable),
            psycopg.connect(pg_uri, connect_timeout=2) as conn,
        ):
            rows = conn.execute("SELECT id, hi FROM crawler_ops.batch_status WHERE task_name = %s", (task_id,))
            self.bounds.update({int(lo): int(hi) for lo, hi in rows})

    def batch_of(self, offset: int) -> tuple[int, int]:
        """The batch holding ``offset``; an offset of no batch seen counts as a batch of its own."""
        starts = sorted(self.bounds)
        index = bisect.bisect_right(starts, offset) - 1
        if index >= 0 and offset < self.bounds[starts[index]]:
            return starts[index], self.bounds[starts[index]]
        return offset, offset + 1


def read_topic(bootstrap: str, topic: str, isolation: str) -> tuple[Mapping[str, int], Mapping[str, int]]:
    """Each key's copies in ``topic`` and its source offset (header ``source_offset``)."""
    offsets: dict[str, int] = {}

    def note(msg: Message) -> None:
        headers = dict(msg.headers() or [])
        if "source_offset" in headers:
            offsets[(msg.key() or b"").decode()] = int(headers["source_offset"])

    return topic_keys(bootstrap, topic, isolation=isolation, on_message=note), offsets


def tally(
    copies: Mapping[str, int], offsets: Mapping[str, int], expected: frozenset[str], batches: BatchBounds
) -> Tally:
    """Compare the copies of each key with the expected keys."""
    twice = [key for key, n in copies.items() if n > 1 and key in expected]
    return Tally(
        received=sum(copies.values()),
        missing=len(expected - copies.keys()),
        unexpected=len(copies.keys() - expected),
        duplicated=len(twice),
        dup_batches=len({batches.batch_of(offsets.get(key, -1)) for key in twice}),
    )


def count_topic(
    bootstrap: str, topic: str, expected: frozenset[str], batches: BatchBounds, isolations: Iterable[str] = ISOLATIONS
) -> dict[str, Tally]:
    """The topic as each consumer isolation level sees it."""
    return {level: tally(*read_topic(bootstrap, topic, level), expected, batches) for level in isolations}


def tallies_json(tallies: Mapping[str, Tally]) -> dict[str, Any]:
    return {level: t.as_dict() for level, t in tallies.items()}
