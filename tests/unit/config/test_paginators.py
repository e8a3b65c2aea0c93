"""The paginator kinds of ``source.paginator``: one class per kind, chosen by ``type`` (an offset paginator when none
is given), each answering what differs between kinds; and the RFC 8288 Link header parser of ``link_header``."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops.config import SourceConfig
from crawler_ops.config.paginators import (
    KINDS,
    CursorPaginator,
    HeaderCursorPaginator,
    LinkHeaderPaginator,
    NextLinkPaginator,
    OffsetPaginator,
    PagePaginator,
    parse_links,
    unquote,
)

PROPERTY = settings(max_examples=300, deadline=None)


@pytest.mark.parametrize(
    ("paginator", "kind", "crawl"),
    [
        ({}, OffsetPaginator, "offsets"),
        ({"type": "offset"}, OffsetPaginator, "offsets"),
        ({"type": "page", "size_param": None}, PagePaginator, "offsets"),
        ({"type": "cursor"}, CursorPaginator, "feed"),
        ({"type": "header_cursor"}, HeaderCursorPaginator, "feed"),
        ({"type": "next_link"}, NextLinkPaginator, "feed"),
        ({"type": "link_header"}, LinkHeaderPaginator, "feed"),
    ],
    ids=["no-type", "offset", "page", "cursor", "header_cursor", "next_link", "link_header"],
)
def test_the_type_picks_the_kind_and_the_kind_its_crawl(paginator, kind, crawl):
    chosen = SourceConfig(paginator=paginator).paginator
    assert type(chosen) is kind and chosen.crawl == crawl
    assert KINDS[chosen.type] is kind


def test_a_setting_of_another_kind_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"paginator\.cursor\.page_param\s+Extra inputs are not permitted"):
        SourceConfig(paginator={"type": "cursor", "page_param": "p"})


@pytest.mark.parametrize(
    ("paginator", "lo", "hi", "batch_size", "expected"),
    [
        ({}, 200, 300, 100, [(200, 100, None, 0, 100)]),
        ({"type": "page"}, 200, 300, 100, [(200, 100, 3, 0, 100)]),
        ({"type": "page"}, 250, 251, 100, [(250, 1, 251, 0, 1)]),
        ({"type": "page", "size_param": None}, 250, 251, 100, [(200, 100, 3, 50, 1)]),
        ({"type": "page", "first_page": 0}, 150, 250, 100, [(100, 100, 1, 50, 50), (200, 100, 2, 0, 50)]),
    ],
    ids=["offsets", "a-page", "one-record-page", "fixed-size-page", "two-pages-from-zero"],
)
def test_a_numbered_kind_cuts_a_batch_into_its_requests(paginator, lo, hi, batch_size, expected):
    cut = SourceConfig(paginator=paginator).paginator.slices(lo, hi, batch_size)
    assert [(s.start, s.size, s.page, s.skip, s.take) for s in cut] == expected


def test_a_page_too_heavy_is_split_into_halves_or_whole_smaller_pages():
    assert [s[:5] for s in OffsetPaginator().parts(0, 100, 100)] == [(0, 50, None, 0, 50), (50, 50, None, 0, 50)]
    pages = PagePaginator(type="page").parts(300, 400, 100)
    assert [(s.start, s.size, s.page) for s in pages] == [(300, 50, 7), (350, 50, 8)]
    assert PagePaginator(type="page", size_param=None).whole() is not None


@pytest.mark.parametrize(
    ("paginator", "body", "headers", "expected"),
    [
        ({"type": "cursor", "cursor_path": "meta.next"}, b'{"meta": {"next": "c2"}}', {}, "c2"),
        ({"type": "cursor"}, b'{"data": []}', {}, None),
        ({"type": "next_link", "next_path": "next"}, b'{"next": "/p?b=2"}', {}, "/p?b=2"),
        ({"type": "link_header"}, b"{}", {"link": ['</p?b=3>; rel="next"']}, "/p?b=3"),
        ({"type": "link_header"}, b"{}", {}, None),
        ({"type": "header_cursor"}, b"{}", {"x-next-cursor": ["o300"]}, "o300"),
        ({"type": "header_cursor", "cursor_header": "Next-Page"}, b"{}", {"next-page": ["p9"]}, "p9"),
        ({"type": "header_cursor"}, b'{"next_cursor": "body"}', {}, None),
    ],
    ids=[
        "cursor",
        "cursor-missing",
        "next-link",
        "link-header",
        "no-link-header",
        "header",
        "named-header",
        "no-header",
    ],
)
def test_a_feed_kind_reads_where_its_answer_names_the_next_page(paginator, body, headers, expected):
    assert SourceConfig(paginator=paginator).paginator.next_position(body, headers) == expected


URLS = st.text("abcxyz0123456789/?=&.:-_%", min_size=1, max_size=30).map(lambda s: f"https://h.example/{s}")
RELS = st.sampled_from(["next", "prev", "last", "first", "NEXT", "Next", "alternate"])
# parameters besides rel, with quoted values that hold the header's separators
OTHER = st.sampled_from(['title="a, b; c"', "type=text/html", 'hreflang="en"', 'title="say \\"hi\\", then go"'])


@st.composite
def links(draw: st.DrawFn) -> list[tuple[str, list[str], list[str]]]:
    return draw(st.lists(st.tuples(URLS, st.lists(RELS, min_size=1, max_size=3), st.lists(OTHER, max_size=2))))


def header(items: list[tuple[str, list[str], list[str]]], space: str, quote_single: bool) -> str:
    parts = []
    for url, rels, other in items:
        rel = rels[0] if quote_single and len(rels) == 1 else '"' + " ".join(rels) + '"'
        params = [f"rel={rel}", *other]
        parts.append(f"<{url}>" + "".join(f"{space};{space}{p}" for p in params))
    return ("," + space).join(parts)


@PROPERTY
@given(links(), st.sampled_from(["", " ", "  "]), st.booleans(), st.integers(0, 3))
def test_each_relation_type_finds_the_first_link_that_has_it(items, space, quote_single, split):
    expected: dict[str, str] = {}
    for url, rels, _ in items:
        for rel in rels:
            expected.setdefault(rel.lower(), url)
    values = [header(items[:split], space, quote_single), header(items[split:], space, quote_single)]

    assert parse_links([v for v in values if v]) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            '<https://api.github.com/repos?page=2>; rel="next", <https://api.github.com/repos?page=5>; rel="last"',
            "https://api.github.com/repos?page=2",
        ),
        ("</items?after=abc>; rel=next", "/items?after=abc"),
        ('<https://a/x>; rel="prev", <https://a/y>; title="next, please"; rel="NEXT last"', "https://a/y"),
        ('<https://a/only-first>; rel="first"', None),
        ("garbage without angle brackets", None),
    ],
)
def test_link_header_examples(value, expected):
    assert parse_links([value]).get("next") == expected


def test_a_header_cursor_sends_its_token_as_the_cursor_and_keeps_the_header_of_each_answer():
    source = SourceConfig(paginator={"type": "header_cursor", "cursor_header": "X-After", "cursor_param": "after"})
    assert source.page_query == {"after": "{cursor}", "limit": "{limit}"}
    assert source.paginator.answer_headers == ("x-after",)
    with pytest.raises(ValueError, match=r"\{page\} cannot be sent by a header_cursor paginator"):
        SourceConfig(paginator={"type": "header_cursor"}, request={"query": {"p": "{page}", "n": "{limit}"}})


# The regular expressions the Link header was read with until 2026-12-07: the same language, but a header of many
# "; a " parameters ending in garbage made them backtrack exponentially (25 of them: 9 s of CPU). Kept here as the
# oracle of what the one-pass reader must answer, on inputs short enough for them.
OLD_LINK = re.compile(r'\s*<([^>]*)>((?:\s*;\s*[^;,="\s]+\s*(?:=\s*(?:"(?:[^"\\]|\\.)*"|[^;,"\s]*))?)*)\s*(?:,|$)')
OLD_PARAM = re.compile(r'\s*;\s*([^;,="\s]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^;,"\s]*))?')


def old_parse_links(values: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for value in values:
        position = 0
        while (
            position < len(value) and (match := OLD_LINK.match(value, position)) is not None and match.end() > position
        ):
            position = match.end()
            for name, raw in OLD_PARAM.findall(match.group(2)):
                if name.lower() == "rel":
                    for rel in unquote(raw).lower().split():
                        found.setdefault(rel, match.group(1).strip())
    return found


@settings(max_examples=2000, deadline=None)
@given(st.text('<>;,= "\\\tarelnx', max_size=24))
def test_the_one_pass_reader_answers_what_the_old_expressions_did(value):
    assert parse_links([value]) == old_parse_links([value])


def test_a_hostile_link_header_is_read_in_time_linear_in_its_length():
    def cost(repeats: int) -> float:
        header = "<https://a/x>" + "; a " * repeats + "!"
        best = float("inf")
        for _ in range(7):  # the best of several: a shared machine's pauses inflate single timings
            started = time.perf_counter()
            assert parse_links([header]) == {}
            best = min(best, time.perf_counter() - started)
        return best

    small, large = cost(2_000), cost(20_000)
    assert large / small < 40, f"10x the header cost {large / small:.0f}x the time: not linear"
