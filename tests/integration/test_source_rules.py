"""``source.responses`` and pages read in parts on the real stack: the demo source answers HTTP 200 with error codes
in the body (``demo_source.envelopes``), and each rule's action is checked against its ground truth in Kafka and
PostgreSQL; pages too large or too slow are read in parts within their batches."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from tests.support import DemoSource, duplicates, make_task, query, read_topic, run_record, watermark
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)
RATE_LIMITED = {"when": {"path": "code", "equals": 42901}, "action": "rate_limited", "wait_path": "data.retry_after"}
BUSY = {"when": {"path": "code", "equals": 50301}, "action": "retry"}
EXPIRED = {"when": {"path": "code", "equals": 40101}, "action": "refresh_auth"}
REFUSED = {"when": {"path": "code", "equals": 40001}, "action": "fail", "message": "the source refused the page"}
WITHHELD = {"name": "withheld", "when": {"path": "code", "equals": 20401}, "action": "skip"}


class Rules:
    """A demo data set with envelope options, crawled through its own connection (its own shared rate row)."""

    def __init__(self, source: DemoSource, source_url: str, monkeypatch: pytest.MonkeyPatch, task: str) -> None:
        self.source, self.task = source, task
        self.conn_id = f"rules_{task}"
        url = httpx.URL(source_url)
        self.conn = {"conn_type": "http", "host": url.host, "port": url.port, "schema": "http"}
        self.monkeypatch = monkeypatch
        self.connect()

    def connect(self, **fields: Any) -> None:
        self.monkeypatch.setenv(f"AIRFLOW_CONN_{self.conn_id.upper()}", json.dumps({**self.conn, **fields}))

    def create(self, total: int, envelopes: dict[str, Any], **config: Any) -> None:
        self.source.create(self.task, total=total, ref=REF, in_window_share=1.0, envelopes=envelopes, **config)

    def task_config(
        self, responses: list[dict[str, Any]], delivery: str = "at_least_once", **source: Any
    ) -> CrawlTaskConfig:
        section = {"conn_id": self.conn_id, "responses": responses, **source}
        kafka = {"dead_letter_topic": f"dl.{self.task}", "delivery": delivery}
        return make_task(self.task, source=section, filter={"days": 30}, kafka=kafka)

    def answered(self) -> dict[str, int]:
        return dict(self.source._json("GET", f"/admin/tasks/{self.task}")["envelopes"])

    def requests(self) -> list[dict[str, Any]]:
        return list(self.source._json("GET", f"/admin/tasks/{self.task}/requests")["requests"])


@pytest.fixture
def rules(source: DemoSource, source_url: str, monkeypatch: pytest.MonkeyPatch, unique_id: str) -> Rules:
    return Rules(source, source_url, monkeypatch, unique_id)


def published_offsets(bootstrap: str, cfg: CrawlTaskConfig) -> list[int]:
    """The source offsets published to the task's topic, each checked to be published once."""
    messages = read_topic(bootstrap, cfg.kafka.topic)
    assert not duplicates(messages), "each record once"
    return sorted(int(m.headers["source_offset"]) for m in messages)


def batch_rows(pg_uri: str, task: str) -> list[tuple[int, int, int]]:
    statement = "SELECT id, hi, status FROM crawler_ops.batch_status WHERE task_name = %s ORDER BY id"
    return [(lo, hi, status) for lo, hi, status in query(pg_uri, statement, task)]


def crawled(cfg: CrawlTaskConfig, pg_uri: str) -> list[tuple[int, int, int]]:
    """Plan, crawl and commit one run as the DAG's steps do; the batch rows as they were before the commit."""
    run = RunContext(cfg=cfg, run_id=f"rules-{cfg.id}", ref=REF, params=RunParams(), map_index=0)
    chunks = plan_run(run)
    results = [crawl_chunk(replace(run, map_index=i), chunk) for i, chunk in enumerate(chunks)]
    rows = batch_rows(pg_uri, cfg.id)
    assert commit_run(run, chunks, results).status == "success"
    return rows


def throttles(pg_uri: str, conn_id: str) -> tuple[int, float]:
    rows = query(pg_uri, "SELECT throttles, cut_at FROM crawler_ops.source_rate WHERE source = %s", conn_id)
    return (int(rows[0][0]), float(rows[0][1])) if rows else (0, 0.0)


def test_rate_limited_envelopes_slow_the_shared_rate_down_and_every_record_is_published_once(
    rules, kafka_bootstrap, pg_uri, run_dag
):
    rules.create(1_050, {"rate_limited_every": 4, "retry_after_s": 0.2})
    cfg = rules.task_config([RATE_LIMITED])

    assert run_dag(cfg, REF) == "success"

    assert published_offsets(kafka_bootstrap, cfg) == list(range(1_050))
    assert watermark(pg_uri, cfg.id) == 1_050
    limited = rules.answered()["42901"]
    assert limited >= 2, "the source asked to slow down"
    count, cut_at = throttles(pg_uri, rules.conn_id)
    assert count == limited, "each answer fed the shared rate's AIMD once"
    assert cut_at > 0, "the shared rate was halved"


def test_retry_envelopes_are_retried_and_every_record_is_published_once(rules, kafka_bootstrap, pg_uri, run_dag):
    rules.create(1_050, {"busy_every": 3})
    cfg = rules.task_config([BUSY])

    assert run_dag(cfg, REF) == "success"

    assert published_offsets(kafka_bootstrap, cfg) == list(range(1_050))
    assert rules.answered()["50301"] >= 3
    assert throttles(pg_uri, rules.conn_id)[0] == 0, "a retry is no rate limit"


def test_an_expired_token_in_the_body_renews_the_shared_token_once_per_expiry(rules, kafka_bootstrap, pg_uri, run_dag):
    demo = {"type": "oauth2", "client_id": "crawler", "client_secret": "s3cret", "token_ttl_s": 600}
    rules.create(2_050, {"expire_every": 8, "expired_in_body": True}, auth=demo)
    rules.connect(login="crawler", password="s3cret")
    auth = {"type": "oauth2_client_credentials", "token_url": f"/oauth/{rules.task}/token"}
    cfg = rules.task_config([EXPIRED], auth=auth)

    assert run_dag(cfg, REF) == "success"

    assert published_offsets(kafka_bootstrap, cfg) == list(range(2_050))
    revoked = rules.answered()["revoked"]
    state = rules.source._json("GET", f"/admin/tasks/{rules.task}/auth")
    assert revoked >= 2 and state["token_requests"] == 1 + revoked, "one token request per expiry"


def test_a_fail_envelope_fails_the_run_with_the_rules_message_the_task_and_the_offsets(rules, pg_uri, run_dag):
    rules.create(1_000, {"fail_offsets": [550]})
    cfg = rules.task_config([RATE_LIMITED, REFUSED])

    assert run_dag(cfg, REF) == "failed"

    errors = json.dumps(run_record(pg_uri, cfg.id)["errors"])
    assert "the source refused the page (source.responses[1]" in errors
    assert f"task {cfg.id}: GET /api/{cfg.id}/list offsets [500, 600)" in errors
    rows = query(pg_uri, "SELECT reason FROM crawler_ops.crawl_error WHERE task_id = %s AND kind = 'batch'", cfg.id)
    assert any("the source refused the page" in reason for (reason,) in rows)
    assert (watermark(pg_uri, cfg.id) or 0) <= 500, "the watermark does not pass the failed page"


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_a_skip_envelope_dead_letters_its_batch_naming_the_rule_and_the_other_pages_are_published(
    delivery, rules, kafka_bootstrap, pg_uri
):
    rules.create(1_000, {"skip_offsets": [750]})
    cfg = rules.task_config([RATE_LIMITED, WITHHELD], delivery)

    rows = crawled(cfg, pg_uri)

    assert published_offsets(kafka_bootstrap, cfg) == [o for o in range(1_000) if not 700 <= o < 800]
    assert (700, 800, 2) in rows, "the skipped batch is done, as an operator's skip-batch makes a parked one"
    assert watermark(pg_uri, cfg.id) == 1_000
    statement = (
        "SELECT source_offset, reason, record FROM crawler_ops.crawl_error WHERE task_id = %s AND kind = 'record'"
    )
    ((offset, reason, record),) = query(pg_uri, statement, cfg.id)
    assert offset == 700 and "offsets [700, 800): source.responses[1] (withheld) matched (skip)" in reason
    assert record == {"code": 20401, "msg": "page withheld"}
    (dead,) = read_topic(kafka_bootstrap, f"dl.{cfg.id}")
    assert dead.value["source_offset"] == 700 and "(withheld)" in dead.value["reason"]
    assert run_record(pg_uri, cfg.id)["dead_lettered"] == 1


@pytest.mark.parametrize(
    ("envelopes", "section"),
    [
        ({"large_over": 25, "large_kb": 200}, {"max_response_mb": 0.1}),
        ({"slow_over": 25, "slow_ms": 3_000}, {"deadline_s": 1, "timeout_s": 10}),
        (
            {"large_over": 25, "large_kb": 200},
            {"max_response_mb": 0.1, "paginator": {"type": "page"}, "page_path": "/api/{task}/pages"},
        ),
    ],
    ids=["too-large", "past-deadline", "too-large-page-numbers"],
)
def test_a_page_too_large_or_too_slow_is_read_in_parts_within_its_batch(
    envelopes, section, rules, kafka_bootstrap, pg_uri, caplog
):
    rules.create(500, envelopes)
    cfg = rules.task_config([], **section)

    rows = crawled(cfg, pg_uri)

    assert published_offsets(kafka_bootstrap, cfg) == list(range(500))
    assert watermark(pg_uri, cfg.id) == 500
    planned = [(lo, lo + 100, 2) for lo in range(0, 500, 100)]
    assert rows == planned, "batches as planned, all done"
    # The source logs a request once it has answered it: a slow answer is logged after the crawler gave up on it.
    halves = [(o, 50) for lo, _, _ in planned for o in (lo, lo + 50)]
    wanted = {(lo, 100) for lo, _, _ in planned} | set(halves) | {(o, 25) for o, _ in halves for o in (o, o + 25)}
    asked = wait_until(
        lambda: (seen := {(r["offset"], r["limit"]) for r in rules.requests()}) >= wanted and seen,
        timeout=30,
        what="the source to log each page, its halves and their halves",
    )
    batch_pages = {(o, n) for o, n in asked if n > 1}  # one-record reads: the first crawl's window search
    assert batch_pages == wanted, sorted(batch_pages - wanted)
    assert "reading it in 2 parts" in caplog.text


def test_rules_with_in_and_exists_and_one_scoped_to_a_404_act_on_the_real_sources_answers(
    rules, kafka_bootstrap, pg_uri
):
    """``in`` retries either of two codes, and ``exists`` on the body of a 404 (a status-scoped rule) dead-letters that
    page, against the demo source's own answers."""
    rules.create(1_000, {"busy_every": 4, "rate_limited_every": 7, "retry_after_s": 0.01})
    rules.source.faults(rules.task, fail_offsets=[450], fail_status=404)
    either = {"when": {"path": "code", "in": [50301, 42901]}, "action": "retry"}
    gone = {"name": "gone", "when": {"status": 404, "path": "msg", "exists": True}, "action": "skip"}
    cfg = rules.task_config([either, gone], max_retries=6)

    rows = crawled(cfg, pg_uri)

    assert published_offsets(kafka_bootstrap, cfg) == [o for o in range(1_000) if not 400 <= o < 500]
    answered = rules.answered()
    assert answered["50301"] >= 2 and answered["42901"] >= 1, "both codes of the `in` rule were answered and retried"
    assert (400, 500, 2) in rows and watermark(pg_uri, cfg.id) == 1_000
    statement = (
        "SELECT source_offset, reason, record FROM crawler_ops.crawl_error WHERE task_id = %s AND kind = 'record'"
    )
    ((offset, reason, record),) = query(pg_uri, statement, cfg.id)
    assert offset == 400 and "source.responses[1] (gone) matched (skip)" in reason
    assert record == {"code": 404, "msg": "injected failure at offset"}, "the 404's body, as the rule read it"
