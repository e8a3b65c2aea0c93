"""The documentation holds together: every relative Markdown link in README.md and docs/**/*.md points to a file
that exists and, with a ``#anchor``, to a heading of that file (GitHub's anchor rules); the README stays short.

Pages other work produces (the generated configuration reference, the deployment guides) may be linked before
they exist; once they exist, links into them are checked like any other."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
# Written elsewhere; a link to one of them counts as broken only once the file exists and lacks the anchor.
PAGES_WRITTEN_ELSEWHERE = {"docs/configuration.md", "docs/deploy.md", "docs/zh/deploy.md"}

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "bench").rglob("*.md"))]


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link targets and emphasis dropped, lower case, punctuation removed (letters of
    any script, digits, ``_`` and ``-`` kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found: set[str] = set(EXPLICIT_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text(encoding="utf-8"))) if not re.match(r"[a-z][a-z+.-]*:", t)]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_to_an_existing_file_and_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        relative = resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else str(resolved)
        if not resolved.exists():
            if relative not in PAGES_WRITTEN_ELSEWHERE:
                broken.append(f"{target}: no file {relative}")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {relative}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"


def test_the_checker_finds_links_and_anchors_as_github_does(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n## `chaos.py`: failures injected\n## Title\n### 从旧采集服务迁移\n"
        "[a](other.md#x) `[not](a-link.md)` ![img](pic.png) [web](https://example.org)\n"
        "```\n[fenced](nope.md)\n```\n",
        encoding="utf-8",
    )
    assert anchors(page) == {"title", "chaospy-failures-injected", "title-1", "从旧采集服务迁移"}
    assert links(page) == ["other.md#x"]
