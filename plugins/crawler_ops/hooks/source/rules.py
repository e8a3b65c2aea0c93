"""Which rule of ``source.responses`` an answer matches (pure: no I/O).

The envelope is read lazily: each step of a path decodes one object level into its keys and raw values (msgspec
skips what it does not keep), so a rule reading ``code`` of a page of a million records does not decode them.
:mod:`crawler_ops.hooks.source.rule_actions` does what the matched rule says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from crawler_ops.config.source_responses import ResponseRule, rule_names

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ABSENT = object()
#: The largest value at a rule's path that is decoded to be compared: the values a rule compares with are a config's
#: constants, so a larger one (the page's records, say) matches no ``equals`` or ``in`` test and is never built.
MAX_TESTED_BYTES = 64 * 1024


@dataclass(frozen=True)
class Verdict:
    """The first rule an answer matched: its place in ``source.responses``, how errors name it, and for
    ``rate_limited`` the seconds the envelope asks to wait (None: none given, or not a number)."""

    index: int
    rule: ResponseRule
    name: str
    wait_s: float | None = None

    @property
    def action(self) -> str:
        return self.rule.action


class Envelope:
    """The values of a JSON body at dotted paths, each object level decoded once, when first asked for."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.levels: dict[str, Any] = {}

    def level(self, prefix: str, raw: bytes | msgspec.Raw) -> Any:
        """The keys and raw values of the object at ``prefix`` (``_ABSENT`` when it is no object)."""
        if prefix not in self.levels:
            try:
                self.levels[prefix] = _OBJECT.decode(raw)
            except (msgspec.DecodeError, RecursionError):  # not an object, or not JSON at all (a truncated body)
                self.levels[prefix] = _ABSENT
        return self.levels[prefix]

    def raw(self, path: str) -> Any:
        """The raw JSON at ``path``, or ``_ABSENT``."""
        node: Any = self.body
        prefix = ""
        for step in path.split("."):
            keys = self.level(prefix, node)
            if keys is _ABSENT or step not in keys:
                return _ABSENT
            node, prefix = keys[step], f"{prefix}.{step}"
        return node

    def value(self, path: str) -> Any:
        """The value at ``path`` as Python objects, or ``_ABSENT`` (also for one over :data:`MAX_TESTED_BYTES`)."""
        raw = self.raw(path)
        if raw is _ABSENT or len(raw) > MAX_TESTED_BYTES:
            return _ABSENT
        try:
            return msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            return _ABSENT


def same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``; objects and arrays compare member by member."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return bool(a == b)


def matches(rule: ResponseRule, envelope: Envelope, status: int) -> bool:
    """Whether ``rule`` applies to an answer with HTTP ``status`` and body ``envelope``."""
    when = rule.when
    if status != (when.status if when.status is not None else 200):
        return False
    test = when.test
    if test is None:
        return True
    assert when.path is not None  # checked by the config
    if test == "exists":
        return (envelope.raw(when.path) is not _ABSENT) == when.exists
    value = envelope.value(when.path)
    if value is _ABSENT:
        return False
    if test == "equals":
        return same(value, when.equals)
    return any(same(value, option) for option in when.in_ or ())


def wait_seconds(value: Any, cap: float, per_second: float = 1.0) -> float | None:
    """Seconds to wait from an envelope's value: a number (or a numeric string) of ``1 / per_second`` seconds
    (1000: milliseconds) within ``[0, cap]`` seconds; None otherwise."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return min(max(0.0, float(value) / per_second), cap)


def first_match(rules: Sequence[ResponseRule], body: bytes, status: int, max_wait_s: float) -> Verdict | None:
    """The first rule of ``rules`` the answer (``status``, ``body``) matches, None when none does.

    :param max_wait_s: the longest wait a ``rate_limited`` rule's ``wait_path`` may ask for
        (``source.max_retry_after_s``).
    """
    if not rules:
        return None
    envelope = Envelope(body)
    for index, rule in enumerate(rules):
        if matches(rule, envelope, status):
            wait = None
            if rule.wait_path is not None:
                scale = 1000.0 if rule.wait_unit == "ms" else 1.0
                wait = wait_seconds(envelope.value(rule.wait_path), max_wait_s, scale)
            return Verdict(index, rule, rule_names(rules)[index], wait)
    return None


def wanted_statuses(rules: Sequence[ResponseRule]) -> frozenset[int]:
    """The HTTP statuses other than 200 whose bodies some rule reads."""
    return frozenset(r.when.status for r in rules if r.when.status is not None and r.when.status != 200)
