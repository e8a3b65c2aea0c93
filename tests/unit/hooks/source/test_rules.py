"""Unit tests of ``source.responses``: the rules' checks (crawler_ops.config.source_responses), which rule an answer
matches (crawler_ops.hooks.source.rules, against a reference that decodes the whole body), and what each action makes
the source hook do (crawler_ops.hooks.source.rule_actions) with a scripted transport and a recording limiter."""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_ops import retry
from crawler_ops.config import SourceConfig
from crawler_ops.config.loading import load_config
from crawler_ops.config.source_responses import ResponseRule
from crawler_ops.errors import PageSkippedError, SourceError, TokenExpiredError
from crawler_ops.hooks.source import hook as source_module
from crawler_ops.hooks.source.hook import SourceApiHook
from crawler_ops.hooks.source.rule_actions import renew_token
from crawler_ops.hooks.source.rules import first_match, same, wait_seconds
from crawler_ops.message.pages import json_path
from tests.unit.hooks.mock_http import route_clients

PROPERTY = settings(max_examples=300, deadline=None)
RATE_LIMITED = {"when": {"path": "code", "equals": 42901}, "action": "rate_limited", "wait_path": "data.retry_after"}
PAGE = {"code": 0, "data": {"total": 2, "data": [{"id": 1}, {"id": 2}]}}


def rules(*specs: dict[str, Any]) -> tuple[ResponseRule, ...]:
    return tuple(ResponseRule.model_validate(spec) for spec in specs)


def body(document: Any) -> bytes:
    return msgspec.json.encode(document)


# --------------------------------------------------------------------------- checks


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"when": {"path": "code", "equals": 1}, "action": "pause"}, "source.responses[1].action"),
        ({"when": {"path": "code", "equals": 1}, "action": "retry", "wait_path": "w"}, "wait_path applies to"),
        ({"when": {"path": "code", "equals": 1}, "action": "skip", "message": "m"}, "message applies to action fail"),
        ({"when": {}, "action": "retry"}, "when is empty"),
        ({"when": {"path": "code"}, "action": "retry"}, "path 'code' needs a test"),
        ({"when": {"equals": 3}, "action": "retry"}, "'equals' needs 'path'"),
        ({"when": {"path": "code", "equals": 1, "exists": True}, "action": "retry"}, "one test per rule"),
        ({"when": {"path": "a..b", "exists": True}, "action": "retry"}, "source.responses[1].when.path"),
        ({"when": {"path": "code", "equals": 1}, "action": "refresh_auth"}, "source.auth.type is none"),
    ],
    ids=["unknown-action", "wait-path", "message", "empty-when", "no-test", "no-path", "two-tests", "bad-path", "auth"],
)
def test_validate_names_the_task_and_the_rule(tmp_path, rule, message):
    config = {"tasks": [{"id": "jobs", "kafka": {"topic": "t"}, "source": {"auth": {"type": "none"}}}]}
    config["tasks"][0]["source"]["responses"] = [RATE_LIMITED, rule]
    path = tmp_path / "tasks.yaml"
    path.write_text(msgspec.json.encode(config).decode())

    loaded = load_config(path)

    assert "jobs" in loaded.errors and message in loaded.errors["jobs"], loaded.errors


def test_a_rule_list_without_mistakes_loads():
    source = SourceConfig.model_validate(
        {
            "responses": [
                RATE_LIMITED,
                {"name": "gone", "when": {"path": "error.kind", "in": ["gone", "deleted"]}, "action": "skip"},
                {"when": {"path": "code", "equals": 40001}, "action": "fail", "message": "the source refused"},
                {"when": {"status": 503}, "action": "retry"},
                {"when": {"path": "data", "exists": False}, "action": "retry"},
            ]
        }
    )
    assert [r.action for r in source.responses] == ["rate_limited", "skip", "fail", "retry", "retry"]
    assert source.responses[1].when.in_ == ("gone", "deleted")


# --------------------------------------------------------------------------- matching

SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 2.5]) | st.sampled_from("ab")
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=8,
)
PATHS = st.lists(st.sampled_from("abc"), min_size=1, max_size=3).map(".".join)
WHEN = st.one_of(
    st.builds(lambda p, v: {"path": p, "equals": v}, PATHS, JSON),
    st.builds(lambda p, v: {"path": p, "in": v}, PATHS, st.lists(JSON, max_size=3)),
    st.builds(lambda p, v: {"path": p, "exists": v}, PATHS, st.booleans()),
)
RULES = st.lists(st.builds(lambda w: {"when": w, "action": "retry"}, WHEN), min_size=1, max_size=4)
DOCUMENTS = st.dictionaries(st.sampled_from("abc"), JSON, max_size=3)


def reference(specs: list[dict[str, Any]], document: Any) -> int | None:
    """The first rule that holds of the whole decoded document (None: none)."""
    for index, spec in enumerate(specs):
        when = spec["when"]
        try:
            value, present = json_path(document, when["path"]), True
        except KeyError:
            value, present = None, False
        if "exists" in when:
            holds = present == when["exists"]
        elif "equals" in when:
            holds = present and same(value, when["equals"])
        else:
            holds = present and any(same(value, option) for option in when["in"])
        if holds:
            return index
    return None


@PROPERTY
@given(RULES, DOCUMENTS)
def test_the_first_rule_that_holds_of_the_whole_document_is_the_one_matched(specs, document):
    verdict = first_match(rules(*specs), body(document), 200, 60)

    assert (verdict.index if verdict else None) == reference(specs, document)


@given(RULES, DOCUMENTS, st.integers(201, 599))
def test_a_rule_without_a_status_reads_only_a_200_and_one_with_a_status_only_that_status(specs, document, status):
    assert first_match(rules(*specs), body(document), status, 60) is None
    with_status = [{**s, "when": {**s["when"], "status": status}} for s in specs]
    verdict = first_match(rules(*with_status), body(document), status, 60)
    assert (verdict.index if verdict else None) == reference(specs, document)


def test_json_equality_tells_true_from_one_and_lists_from_objects():
    assert same(1, 1.0) and not same(True, 1) and not same([1], {"a": 1}) and same({"a": [1, None]}, {"a": [1, None]})


def test_a_body_that_is_not_json_or_not_an_object_matches_no_test_of_a_value():
    specs = rules({"when": {"path": "code", "equals": 1}, "action": "retry"})
    assert first_match(specs, b'{"code": 1, "data": [', 200, 60) is None, "truncated: the page decode says so"
    assert first_match(specs, b"[1, 2]", 200, 60) is None
    absent = rules({"when": {"path": "data.data", "exists": False}, "action": "retry"})
    assert first_match(absent, b"[1, 2]", 200, 60) is not None, "nothing is there"


def test_a_rule_testing_a_large_value_never_builds_it():
    # A page of 20 MB whose records sit where a rule compares a value: nothing of them is decoded.
    records = b",".join(b'{"id": "%d", "text": "xxxxxxxxxxxxxxxxxxxx"}' % i for i in range(400_000))
    page = b'{"code": 0, "data": [' + records + b"]}"
    specs = rules(
        {"when": {"path": "data", "equals": []}, "action": "retry"},
        {"when": {"path": "data", "in": [[], None]}, "action": "retry"},
        {"when": {"path": "code", "equals": 0}, "action": "fail"},
    )
    tracemalloc.start()
    verdict = first_match(specs, page, 200, 60)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert verdict is not None and verdict.index == 2, "the large value matched no equality; the small one did"
    assert peak < 2 * 2**20, f"{peak / 2**20:.0f} MiB built to test a rule"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3.0), (2.5, 2.5), ("4", 4.0), (-1, 0.0), (10_000, 60.0), (True, None), ("soon", None), (None, None)],
)
def test_the_wait_read_from_the_body_is_a_number_of_seconds_within_the_cap(value, expected):
    assert wait_seconds(value, 60) == expected


# --------------------------------------------------------------------------- actions through the hook


class Limiter:
    """Records the hook's throttles (the shared limiter's AIMD is tested in test_ratelimit.py)."""

    def __init__(self) -> None:
        self.throttles: list[float | None] = []

    def attach(self) -> None: ...

    def detach(self) -> None: ...

    def request(self, max_wait: float | None = None) -> Any:
        from contextlib import nullcontext

        return nullcontext()

    def throttle(self, retry_after: float | None) -> None:
        self.throttles.append(retry_after)


class Served:
    """Answers in order (the last repeats), the requests, and the hook's sleeps (recorded, not slept)."""

    def __init__(self) -> None:
        self.answers: list[bytes] = []
        self.calls: list[httpx.Request] = []
        self.sleeps: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request)
        return httpx.Response(200, content=self.answers[min(len(self.calls), len(self.answers)) - 1])


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, airflow_connection: Callable[..., None]) -> Served:
    answers = Served()
    route_clients(monkeypatch, answers)
    airflow_connection("src", conn_type="http", host="source.test", schema="http")
    clock = {"sleep": staticmethod(answers.sleeps.append), "monotonic": staticmethod(time.monotonic)}
    monkeypatch.setattr(source_module, "time", type("Clock", (), clock))
    monkeypatch.setattr(retry, "full_jitter", lambda ceiling: ceiling)  # each wait at its ceiling, not below it
    return answers


def hook(specs: list[dict[str, Any]], limiter: Limiter | None = None, **source: Any) -> SourceApiHook:
    cfg = SourceConfig(conn_id="src", backoff_s=0.5, max_retries=2, responses=specs, **source)
    return SourceApiHook(cfg, "jobs", "remote_jobs", limiter=limiter)  # type: ignore[arg-type]


def test_rate_limited_slows_every_worker_down_waits_what_the_body_says_and_retries(served):
    served.answers = [body({"code": 42901, "data": {"retry_after": 7}}), body(PAGE)]
    limiter = Limiter()

    page = hook([RATE_LIMITED], limiter).get_page(0, 2)

    assert len(page) == 2 and limiter.throttles == [7.0] and served.sleeps == [7.0]


def test_a_wait_given_in_milliseconds_is_waited_in_seconds(served):
    served.answers = [body({"code": 42901, "data": {"retry_after_ms": 1500}}), body(PAGE)]
    in_ms = {**RATE_LIMITED, "wait_path": "data.retry_after_ms", "wait_unit": "ms"}
    limiter = Limiter()

    assert len(hook([in_ms], limiter).get_page(0, 2)) == 2

    assert limiter.throttles == [1.5] and served.sleeps == [1.5]


def test_wait_unit_needs_a_wait_path():
    with pytest.raises(ValueError, match="wait_unit applies with a wait_path only"):
        rules({"when": {"path": "code", "equals": 1}, "action": "rate_limited", "wait_unit": "ms"})


def test_retry_backs_off_and_gives_up_after_max_retries(served):
    served.answers = [body({"code": 50301})]

    with pytest.raises(SourceError, match=r"responses\[0\] matched \(retry\).*gave up after 3 attempts") as err:
        hook([{"when": {"path": "code", "equals": 50301}, "action": "retry"}]).get_page(0, 2)

    assert err.value.retriable and served.sleeps == [0.5, 1.0] and len(served.calls) == 3


def test_fail_names_the_rules_message_the_task_the_request_and_the_offsets_without_retrying(served):
    served.answers = [body({"code": 40001, "msg": "no such data set"})]
    spec = {"name": "refused", "when": {"path": "code", "equals": 40001}, "action": "fail", "message": "source refused"}

    with pytest.raises(SourceError) as err:
        hook([spec]).get_page(300, 2)

    assert str(err.value).startswith("task jobs: GET /api/remote_jobs/list offsets [300, 302): source refused")
    assert "source.responses[0] (refused)" in str(err.value) and "no such data set" in str(err.value)
    assert not err.value.retriable and len(served.calls) == 1


def test_skip_ends_the_page_with_the_envelope_for_its_dead_letter(served):
    served.answers = [body({"code": 20401, "msg": "withheld"})]

    with pytest.raises(PageSkippedError, match=r"offsets \[0, 2\): source.responses\[1\] \(withheld\)") as err:
        hook(
            [RATE_LIMITED, {"name": "withheld", "when": {"path": "code", "equals": 20401}, "action": "skip"}]
        ).get_page(0, 2)

    assert err.value.envelope == {"code": 20401, "msg": "withheld"} and len(served.calls) == 1


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_skipped_pages_envelope_never_holds_the_secret_the_source_echoed(served, airflow_connection, size):
    airflow_connection("src", conn_type="http", host="source.test", schema="http", password="tok-canary-77")
    padding = "x" * (70_000 if size == "large" else 0)
    served.answers = [body({"code": 20401, "msg": f"withheld for Bearer tok-canary-77 {padding}"})]
    skip = {"name": "withheld", "when": {"path": "code", "equals": 20401}, "action": "skip"}

    with pytest.raises(PageSkippedError) as err:
        hook([skip], auth={"type": "bearer"}).get_page(0, 2)

    stored = json.dumps(err.value.envelope)
    assert "tok-canary-77" not in stored and "***" in stored, "the dead letter stores what the source echoed, masked"
    assert "tok-canary-77" not in str(err.value)


def test_the_first_matching_rule_decides(served):
    served.answers = [body({"code": 42901, "data": {"retry_after": 1}}), body(PAGE)]
    specs = [RATE_LIMITED, {"when": {"path": "data.retry_after", "exists": True}, "action": "fail", "message": "m"}]

    assert len(hook(specs, Limiter()).get_page(0, 2)) == 2, "rate_limited, listed first, wins over fail"


def test_refresh_auth_renews_once_per_request_and_only_a_token_it_has():
    expired = TokenExpiredError("task jobs: GET /api/remote_jobs/list offsets [0, 2): token expired", "Bearer t")

    with pytest.raises(SourceError, match=r"source\.auth has no token to renew") as err:
        renew_token(httpx.BasicAuth("u", "p"), expired, renewed=False)
    assert not err.value.retriable
    with pytest.raises(SourceError, match="renewed once for this request already") as err:
        renew_token(None, expired, renewed=True)
    assert not err.value.retriable


def test_a_page_no_rule_matches_is_read_as_without_rules_and_a_wrong_shape_still_fails(served):
    served.answers = [body(PAGE)]
    assert len(hook([RATE_LIMITED]).get_page(0, 2)) == 2
    served.answers = [body({"code": 0, "data": {"items": []}})]
    with pytest.raises(SourceError, match=r"has no list of records at 'data\.data'"):
        hook([RATE_LIMITED]).get_page(0, 2)


def test_a_rule_with_a_status_reads_that_error_answers_body(monkeypatch, airflow_connection):
    replies = iter([httpx.Response(503, json={"error": {"kind": "maintenance"}}), httpx.Response(200, json=PAGE)])
    route_clients(monkeypatch, lambda request: next(replies))
    airflow_connection("src", conn_type="http", host="source.test", schema="http")
    monkeypatch.setattr(
        source_module, "time", type("Clock", (), {"sleep": lambda s: None, "monotonic": time.monotonic})
    )
    spec = {"when": {"status": 503, "path": "error.kind", "equals": "maintenance"}, "action": "fail", "message": "m"}

    with pytest.raises(SourceError, match=r"offsets \[0, 2\): m \(source.responses\[0\]"):
        hook([spec]).get_page(0, 2)


def test_rules_read_the_count_answer_too(served):
    served.answers = [body({"code": 42901, "data": {"retry_after": "2"}}), body({"code": 0, "data": {"total": 7}})]
    limiter = Limiter()

    assert hook([RATE_LIMITED], limiter).get_total() == 7
    assert limiter.throttles == [2.0] and served.sleeps == [2.0]
