"""``source.responses``: rules over the envelope of an answer (a page or the count), for sources that report
throttling, an expired token or an error in the body of an HTTP 200 (pure: no I/O).

A rule's ``when`` reads one value of the envelope at a dotted path (the style of ``records_path``) and compares it
(``equals``, ``in``, ``exists``); ``status`` makes a rule read the body of an answer with that HTTP status instead of
a 200. The first rule that matches decides; an answer no rule matches is read as a page (or a count) as without
rules. Matching is :mod:`crawler_ops.hooks.source.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

#: A dotted path of object keys, as ``records_path``.
PATH_PATTERN = r"^[^.\s]+(\.[^.\s]+)*$"

Action = Literal["rate_limited", "refresh_auth", "retry", "fail", "skip"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ResponseWhen(_Section):
    """When a rule applies: a value of the envelope (``path`` and one test of it), an HTTP status, or both."""

    path: str | None = Field(None, pattern=PATH_PATTERN, description="dotted path of the value the rule tests")
    equals: JsonValue = Field(None, description="the value at path equals this (any JSON, null included)")
    in_: tuple[JsonValue, ...] | None = Field(None, alias="in", description="the value at path is one of these")
    exists: bool | None = Field(None, description="true: path is present (any value); false: it is absent")
    status: int | None = Field(
        None,
        ge=100,
        le=599,
        description="the answer's HTTP status (default 200); with another status the rule reads that answer's body "
        "(its first 64 KiB) as the envelope",
    )

    @model_validator(mode="after")
    def _one_test(self) -> ResponseWhen:
        tests = [name for name in ("equals", "in_", "exists") if name in self.model_fields_set]
        shown = [name.rstrip("_") for name in tests]
        if len(tests) > 1:
            raise ValueError(f"one test per rule: {' and '.join(shown)} given")
        if tests and self.path is None:
            raise ValueError(f"'{shown[0]}' needs 'path': the value it tests")
        if self.path is not None and not tests:
            raise ValueError(f"path '{self.path}' needs a test: equals, in or exists")
        if not tests and self.status is None:
            raise ValueError("when is empty: give path with equals, in or exists, or a status")
        return self

    @property
    def test(self) -> str | None:
        """Which test the rule makes (``equals``, ``in``, ``exists``), None for a status alone."""
        for name in ("equals", "in_", "exists"):
            if name in self.model_fields_set:
                return name.rstrip("_")
        return None


class ResponseRule(_Section):
    """One rule: when it applies and what the crawler does then."""

    name: str | None = Field(
        None, min_length=1, description="how dead letters, errors and logs name the rule; default responses[i]"
    )
    when: ResponseWhen = Field(description="the condition over the answer's envelope")
    action: Action = Field(
        description="rate_limited: slow every worker down (the shared rate, as a 429) and retry; refresh_auth: renew "
        "the shared token once and retry (as a 401); retry: retry with backoff (source.max_retries); fail: fail the "
        "batch for good with message; skip: dead-letter the page's batch (0 records, one dead letter naming the rule) "
        "and go on"
    )
    wait_path: str | None = Field(
        None,
        pattern=PATH_PATTERN,
        description="rate_limited: dotted path of the time to wait in the envelope, in wait_unit (capped by "
        "max_retry_after_s)",
    )
    wait_unit: Literal["s", "ms"] = Field(
        "s", description="rate_limited: the unit of the value at wait_path: seconds, or milliseconds (retry_after_ms)"
    )
    message: str | None = Field(None, min_length=1, description="fail: the error's message")

    @model_validator(mode="after")
    def _fits_action(self) -> ResponseRule:
        if self.wait_path is not None and self.action != "rate_limited":
            raise ValueError(f"wait_path applies to action rate_limited only, not {self.action}")
        if "wait_unit" in self.model_fields_set and self.wait_path is None:
            raise ValueError("wait_unit applies with a wait_path only")
        if self.message is not None and self.action != "fail":
            raise ValueError(f"message applies to action fail only, not {self.action}")
        return self


def check_rules(rules: Sequence[ResponseRule], renews_tokens: bool, auth_type: str, feed: str | None = None) -> None:
    """A ``refresh_auth`` rule needs a token to renew: an OAuth2 auth type; a ``skip`` rule needs offsets to pass
    over, which a ``feed`` (its sequential paginator's type) does not have."""
    for name, rule in zip(rule_names(rules), rules, strict=True):
        if rule.action == "skip" and feed is not None:
            raise ValueError(
                f"{name}: action skip passes over a page, but a {feed} feed learns where its next page is from the "
                "page itself; use retry or fail"
            )
        if rule.action == "refresh_auth" and not renews_tokens:
            raise ValueError(
                f"{name}: action refresh_auth renews an OAuth2 token, but source.auth.type is {auth_type}; use "
                "oauth2_client_credentials or oauth2_refresh_token, or another action"
            )


def rule_names(rules: Sequence[ResponseRule]) -> list[str]:
    """How each rule is named in errors and dead letters: ``responses[i]``, with its name when it has one."""
    return [f"source.responses[{i}]" + (f" ({r.name})" if r.name else "") for i, r in enumerate(rules)]
