"""Text shown on a terminal: stored error text, task ids and file contents may carry control characters, and an
escape sequence in them would act on the operator's terminal (retitle it, clear it, fake lines). These functions
show such characters escaped instead; printable text of every script is left as it is."""

from __future__ import annotations

# C0 and C1 controls and DEL act on a terminal; the bidirectional overrides and isolates reorder what is shown (the
# "Trojan source" characters); the Unicode line and paragraph separators break lines.
_UNSAFE = [
    *range(0x20),
    *range(0x7F, 0xA0),
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x200E,
    0x200F,
    0x2028,
    0x2029,
]
_NAMED = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}

_TEXT = {code: _NAMED.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}") for code in _UNSAFE}
_TEXT_LINES = {code: escape for code, escape in _TEXT.items() if code not in (ord("\n"), ord("\t"))}
# In JSON text the controls below 0x20 are escaped already; the rest become JSON's own \u escapes (still valid JSON).
_JSON = {code: f"\\u{code:04x}" for code in _UNSAFE if code >= 0x20}


def terminal_safe(text: str, keep_newlines: bool = False) -> str:
    """``text`` with control, bidirectional and line-separator characters shown escaped (``\\x1b``, ``\\u202e``);
    with ``keep_newlines``, line feeds (and tabs) are left to lay out the text."""
    return text.translate(_TEXT_LINES if keep_newlines else _TEXT)


def json_terminal_safe(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with the characters :func:`terminal_safe` escapes
    written as JSON ``\\u`` escapes: the same JSON value, safe to print."""
    return text.translate(_JSON)
