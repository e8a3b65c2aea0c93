"""`make bench`'s targets table holds the crawl span against each target and, beside it, the chunk tasks alone: their
records over their own elapsed time, summed over the chunks, so a run of several chunks is not the mean of their
rates."""

from __future__ import annotations

from crawlbench.report import targets_table
from crawlbench.results import Suite, Variant


def variant(name: str, rate: float) -> Variant:
    return Variant(name=name, wall_s=1.0, pages=None, fetched=0, kept=0, published=0, rate=rate)


def suite(latency_ms: float, spans: list[dict]) -> Suite:
    variants = [
        variant("source drain", 100_000.0),
        variant("sink limit (1 flush)", 200_000.0),
        variant("old algorithm (no sleep)", 10_000.0),
        variant("project: crawl span (PG)", 60_000.0),
    ]
    return Suite(
        dataset={"batch": 1000},
        variants=variants,
        project={"timeline": {"spans": spans}},
        components={},
        problems=[],
        latency_ms=latency_ms,
    )


def test_the_chunks_alone_are_their_records_over_their_summed_elapsed_time():
    chunks = [
        {"task": "plan", "map_index": -1},
        {"task": "crawl_chunk", "map_index": 0, "fetched": 90_000, "elapsed_s": 1.0},
        {"task": "crawl_chunk", "map_index": 1, "fetched": 10_000, "elapsed_s": 0.25},
    ]
    assert suite(0, chunks).chunk_rate() == 80_000  # not 65,000, the mean of 90,000 and 40,000 a second


def test_a_chunk_without_its_elapsed_time_leaves_the_chunks_unknown():
    chunks = [
        {"task": "crawl_chunk", "map_index": 0, "fetched": 90_000, "elapsed_s": 1.0},
        {"task": "crawl_chunk", "map_index": 1, "fetched": 10_000, "elapsed_s": None},
    ]
    assert suite(0, chunks).chunk_rate() is None
    assert suite(0, []).chunk_rate() is None


def test_the_targets_table_puts_the_chunk_alone_beside_the_span():
    spans = [{"task": "crawl_chunk", "map_index": 0, "fetched": 85_000, "elapsed_s": 1.0}]
    table = targets_table([suite(0, spans), suite(50, spans)])
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    cells = [[cell.strip() for cell in row] for row in rows]
    local, old_loop, limit, slow = cells
    assert local == ["0", "60,000", "min(source drain, sink limit)", "100,000", "0.60", "≥ 0.8", "NO", "85,000", "0.85"]
    assert old_loop[3:9] == ["10,000", "6.00", "≥ 5", "yes", "85,000", "8.50"]
    assert limit[3:] == ["100,000", "0.60", "≥ 0.8", "NO", "85,000", "0.85"]
    assert slow[-3:] == ["not measured", "-", "-"]
