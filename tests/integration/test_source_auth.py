"""Auth of the source on the real stack: each ``source.auth`` type against the demo source's ground truth, OAuth2
tokens shared by parallel chunk processes through PostgreSQL, a 401's one renewal, a kill between the provider's
answer and the commit, and no secret in logs, run records, webhooks, XComs, the status view or the check."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawler_ops.config import CrawlTaskConfig
from crawler_ops.crawl.run import RunContext, RunParams
from crawler_ops.crawl.steps import commit_run, crawl_chunk, plan_run
from crawler_ops.hooks.source.tokens import reset_tokens
from tests.support import (
    DemoSource,
    Receiver,
    chunk_spec,
    cli,
    duplicates,
    make_task,
    query,
    read_topic,
    runner_result,
    spawn_runner,
    write_config,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

REF = datetime(2026, 11, 1, tzinfo=UTC)


def secret(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


class Auth:
    """The demo source's auth API of one data set, and the Airflow connection a crawl uses for it."""

    def __init__(self, source: DemoSource, source_url: str, monkeypatch: pytest.MonkeyPatch, task: str) -> None:
        self.source, self.url, self.monkeypatch, self.task = source, httpx.URL(source_url), monkeypatch, task
        self.conn_id = f"auth_{task}"

    def create(self, total: int, auth: dict[str, Any], **config: Any) -> None:
        self.source.create(self.task, total=total, ref=REF, in_window_share=1.0, auth=auth, **config)

    def connect(
        self, login: str | None = None, password: str | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        conn = {"conn_type": "http", "host": self.url.host, "port": self.url.port, "schema": "http"}
        conn |= {"login": login, "password": password, "extra": json.dumps(extra or {})}
        self.monkeypatch.setenv(f"AIRFLOW_CONN_{self.conn_id.upper()}", json.dumps(conn))

    def state(self) -> dict[str, Any]:
        return dict(self.source._json("GET", f"/admin/tasks/{self.task}/auth"))

    def revoke(self) -> None:
        self.source._json("POST", f"/admin/tasks/{self.task}/auth/revoke")

    def task_config(self, auth: dict[str, Any], **overrides: Any) -> CrawlTaskConfig:
        source = {"conn_id": self.conn_id, "auth": auth, **overrides.pop("source", {})}
        return make_task(self.task, source=source, filter={"days": 30}, **overrides)

    @property
    def token_url(self) -> str:
        return f"/oauth/{self.task}/token"


@pytest.fixture
def auth(source: DemoSource, source_url: str, monkeypatch: pytest.MonkeyPatch, unique_id: str) -> Auth:
    return Auth(source, source_url, monkeypatch, unique_id)


def published_exactly_the_source(source: DemoSource, bootstrap: str, cfg: CrawlTaskConfig, total: int) -> None:
    messages = read_topic(bootstrap, cfg.kafka.topic)
    truth = source.truth(cfg.id, REF, days=30, tolerance_s=86_400)["in_window_ids"]
    assert sorted(m.key for m in messages) == sorted(truth)
    assert len(messages) == total and not duplicates(messages)


# Per type: the demo source's auth, the crawl's source.auth, and the connection (login, password, extra) with the
# right secret; the wrong one replaces the password (or the extra's token).
def basic(s: dict[str, str], _task: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    demo = {"type": "basic", "login": "crawler", "password": s["token"]}
    return demo, {"type": "basic"}, {"login": "crawler", "password": s["token"]}


def bearer_in_extra(s: dict[str, str], _task: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return {"type": "bearer", "token": s["token"]}, {"type": "bearer"}, {"extra": {"token": s["token"]}}


def bearer(s: dict[str, str], _task: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return {"type": "bearer", "token": s["token"]}, {"type": "bearer"}, {"password": s["token"]}


def key_header(s: dict[str, str], _task: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    demo = {"type": "api_key", "key": s["token"], "key_name": "X-Api-Key"}
    return demo, {"type": "api_key", "name": "X-Api-Key"}, {"password": s["token"]}


def key_query(s: dict[str, str], _task: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    demo = {"type": "api_key", "key": s["token"], "key_name": "apikey", "key_in": "query"}
    return demo, {"type": "api_key", "name": "apikey", "in": "query"}, {"password": s["token"]}


def client_credentials(s: dict[str, str], task: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    demo = {"type": "oauth2", "client_id": "crawler", "client_secret": s["token"], "token_ttl_s": 600}
    crawl = {"type": "oauth2_client_credentials", "token_url": f"/oauth/{task}/token", "scope": "jobs.read"}
    return demo, crawl, {"login": "crawler", "password": s["token"]}


def refresh_token(s: dict[str, str], task: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    demo = {"type": "oauth2", "client_id": "crawler", "client_secret": s["client"], "refresh_token": s["token"]}
    demo |= {"rotate": True, "token_ttl_s": 600}
    crawl = {"type": "oauth2_refresh_token", "token_url": f"/oauth/{task}/token", "client_auth": "body"}
    return demo, crawl, {"login": "crawler", "password": s["token"], "extra": {"client_secret": s["client"]}}


MODES = [basic, bearer, bearer_in_extra, key_header, key_query, client_credentials, refresh_token]


@pytest.mark.parametrize("mode", MODES, ids=[m.__name__ for m in MODES])
def test_each_auth_type_crawls_the_source_and_no_secret_leaks(
    mode: Callable[..., Any],
    auth: Auth,
    receiver: Receiver,
    kafka_bootstrap: str,
    pg_uri: str,
    run_dag: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.INFO, logger="httpx")  # its request lines carry URLs (Airflow quiets it; one may not)
    secrets = {"token": secret("tok"), "client": secret("client")}
    demo, crawl, conn = mode(secrets, auth.task)
    auth.create(600, demo)
    cfg = auth.task_config(crawl, notify={"conn_id": f"hook_{auth.task}", "on": ["success", "failure"]})
    wrong = secret("wrong")
    if "extra" in conn and "token" in conn["extra"]:
        auth.connect(extra={"token": wrong})
    else:
        auth.connect(**{**conn, "password": wrong})

    assert run_dag(cfg, REF) == "failed", "the demo source refuses a wrong secret"
    status_failed = cli("status", "--task", auth.task, "--json")

    auth.connect(**conn)
    assert run_dag(cfg, datetime(2026, 11, 1, 1, tzinfo=UTC)) == "success"

    published_exactly_the_source(auth.source, kafka_bootstrap, cfg, 600)
    if demo["type"] == "oauth2":
        state = auth.state()
        assert state["token_requests"] - state["refused_grants"] == 1, "one token for the whole run (plan, chunks)"
    status = cli("status", "--task", auth.task, "--json")
    assert status.returncode == 0, status.stderr
    issued = query(
        pg_uri, "SELECT access_token, refresh_token FROM crawler_ops.source_token WHERE source = %s", auth.conn_id
    )
    runs = query(pg_uri, "SELECT row_to_json(r)::text FROM crawler_ops.crawl_run r WHERE task_id = %s", auth.task)
    errors = query(pg_uri, "SELECT row_to_json(e)::text FROM crawler_ops.crawl_error e WHERE task_id = %s", auth.task)
    assert len(runs) == 2 and errors, "a failed run and its errors, a successful run"
    checked = cli("check", "--task", auth.task, "--json", "--config", str(write_config(cfg, tmp_path)))
    out, err = capfd.readouterr()
    places = {
        "logs": caplog.text + out + err,
        "run records": "\n".join(r[0] for r in runs + errors),
        "webhooks": "\n".join(r["body"].decode() for r in receiver.requests),
        "status view": status_failed.stdout + status_failed.stderr + status.stdout + status.stderr,
        "XComs": dag_xcoms(cfg.dag_id),
        "check": checked.stdout + checked.stderr,
    }
    assert places["XComs"] and '"total"' in checked.stdout, "what is searched holds something"
    assert len(receiver.requests) == 2 and auth.task in places["webhooks"]
    shown = [s for s in [*secrets.values(), wrong, *(v for row in issued for v in row if v)] if len(s) >= 4]
    shown += [base64.b64encode(f"crawler:{s}".encode()).decode() for s in (secrets["token"], wrong)]  # basic's header
    for where, text in places.items():
        leaked = [s for s in shown if s in text]
        assert not leaked, f"{len(leaked)} secret(s) in the {where}"


def dag_xcoms(dag_id: str) -> str:
    """Every XCom value of ``dag_id``'s runs in Airflow's metadata database, as text."""
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with create_session() as session:
        rows = session.execute(text("SELECT value FROM xcom WHERE dag_id = :dag"), {"dag": dag_id}).scalars().all()
    return "\n".join(json.dumps(row, default=str) for row in rows)


def crawl_in_processes(cfg: CrawlTaskConfig, run_id: str, kill: dict[str, Any] | None = None) -> Any:
    """Plan a run here, crawl its chunks in parallel in processes of their own, commit it here."""
    run = RunContext(cfg=cfg, run_id=run_id, ref=REF, params=RunParams())
    chunks = plan_run(run)
    workers = [
        spawn_runner("chunk_runner.py", chunk_spec(cfg, run_id, REF, chunk, map_index=index, kill=kill))
        for index, chunk in enumerate(chunks)
    ]
    results = [runner_result(worker) for worker in workers]
    return run, chunks, results


def test_parallel_chunks_make_one_token_request_per_expiry(auth: Auth, kafka_bootstrap: str) -> None:
    ttl = 0.5
    # A slow provider: workers that need a token while one renews it wait on the row lock.
    demo = {"type": "oauth2", "client_id": "crawler", "client_secret": "s3cret-cc", "token_ttl_s": ttl}
    auth.create(12_000, {**demo, "token_latency_ms": 150})
    auth.source.faults(auth.task, latency_ms=100)
    auth.connect(login="crawler", password="s3cret-cc")
    crawl = {"type": "oauth2_client_credentials", "token_url": auth.token_url}
    cfg = auth.task_config(crawl, max_chunks=4, min_batches_per_chunk=1, source={"concurrency": 2})

    run, chunks, results = crawl_in_processes(cfg, "expiring")

    assert len(chunks) == 4 and commit_run(run, chunks, results).status == "success"
    published_exactly_the_source(auth.source, kafka_bootstrap, cfg, 12_000)
    state = auth.state()
    issued = state["issued_at"]
    assert len(issued) >= 4, f"the crawl outlived several tokens ({len(issued)} issued): nothing was tested"
    # A token is renewed a tenth of its lifetime before it expires, by one worker: none sooner after the last.
    gaps = [later - earlier for earlier, later in itertools.pairwise(issued)]
    assert min(gaps) >= 0.9 * ttl - 0.05, f"tokens requested {min(gaps):.3f}s apart (lifetime {ttl}s): {gaps}"
    assert state["token_requests"] == len(issued) and state["refused_grants"] == 0


def test_a_401_leads_to_one_renewal_shared_by_every_worker(auth: Auth, kafka_bootstrap: str) -> None:
    auth.create(18_000, {"type": "oauth2", "client_id": "crawler", "client_secret": "s3cret-cc", "token_ttl_s": 600})
    auth.source.faults(auth.task, latency_ms=100)
    auth.connect(login="crawler", password="s3cret-cc")
    crawl = {"type": "oauth2_client_credentials", "token_url": auth.token_url}
    cfg = auth.task_config(crawl, max_chunks=3, min_batches_per_chunk=1, source={"concurrency": 2})
    run = RunContext(cfg=cfg, run_id="revoked", ref=REF, params=RunParams())
    chunks = plan_run(run)  # takes the first token
    workers = [
        spawn_runner("chunk_runner.py", chunk_spec(cfg, run.run_id, REF, chunk, map_index=index))
        for index, chunk in enumerate(chunks)
    ]
    # More requests in flight than two chunks send at once: every worker is crawling with the first token.
    wait_until(lambda: auth.source.in_flight(auth.task)["in_flight"] >= 5, 120, "three chunks crawling at once")
    auth.revoke()  # as a provider ending a session early: every worker's next request gets a 401

    results = [runner_result(worker) for worker in workers]

    assert commit_run(run, chunks, results).status == "success"
    published_exactly_the_source(auth.source, kafka_bootstrap, cfg, 18_000)
    state = auth.state()
    assert state["refused"] >= 3, "the revoked token was sent and refused"
    assert state["token_requests"] == 2, "the first token, and one renewal after the 401s of every worker"


def test_a_kill_between_the_providers_answer_and_the_commit_does_not_lock_the_source_out(
    auth: Auth, kafka_bootstrap: str, pg_uri: str
) -> None:
    first = secret("rt")
    demo = {"type": "oauth2", "refresh_token": first, "rotate": True, "token_ttl_s": 600}
    auth.create(1_000, demo)
    auth.connect(password=first)
    cfg = auth.task_config({"type": "oauth2_refresh_token", "token_url": auth.token_url}, max_chunks=1)
    run = RunContext(cfg=cfg, run_id="killed", ref=REF, params=RunParams(), map_index=0)
    (chunk,) = plan_run(run)  # first token, and a rotated refresh token saved with it
    expire = "UPDATE crawler_ops.source_token SET expires_at = now() - interval '1 second' WHERE source = %s"
    query(pg_uri, expire + " RETURNING source", auth.conn_id)

    killed = spawn_runner("chunk_runner.py", chunk_spec(cfg, run.run_id, REF, chunk, kill={"point": "token_saved"}))
    killed.communicate(timeout=300)

    assert killed.returncode == -9, "the worker died with the provider's new refresh token unsaved"
    assert auth.state()["grants"] == {"refresh_token": 2}
    reset_tokens()  # the retry runs in a new process: it knows the token row only
    result = crawl_chunk(replace(run, try_number=2), chunk)
    assert commit_run(run, [chunk], [result]).status == "success"
    published_exactly_the_source(auth.source, kafka_bootstrap, cfg, 1_000)
    state = auth.state()
    assert state["grants"] == {"refresh_token": 3} and state["refused_grants"] == 0
    # The refresh token saved last still works: the next renewal is not locked out either.
    query(pg_uri, expire + " RETURNING source", auth.conn_id)
    reset_tokens()
    assert replace(run, try_number=3).source().get_total() == 1_000
    assert auth.state()["grants"] == {"refresh_token": 4}


def test_a_lost_connection_to_the_token_row_is_replaced_within_the_request(auth: Auth, pg_uri: str) -> None:
    auth.create(100, {"type": "oauth2", "client_id": "crawler", "client_secret": "s3cret-cc", "token_ttl_s": 600})
    auth.connect(login="crawler", password="s3cret-cc")
    crawl = {"type": "oauth2_client_credentials", "token_url": auth.token_url}
    # No retry of the request, as the status view asks: the lost connection is replaced within it.
    cfg = auth.task_config(crawl, source={"max_retries": 0})
    run = RunContext(cfg=cfg, run_id="lost", ref=REF, params=RunParams())
    source = run.source()
    assert source.get_total() == 100
    assert source.token is not None
    backend = source.token.store.db.info.backend_pid
    query(pg_uri, "SELECT pg_terminate_backend(%s)", backend)  # a server restart, as this process sees it
    source.token.forget()  # the token is to be read from the row again

    assert source.get_total() == 100

    assert source.token.store.db.info.backend_pid != backend
    assert auth.state()["token_requests"] == 1, "the stored token was read again, not renewed"
