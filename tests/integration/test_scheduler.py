"""Driving crawl DAGs as users do: Airflow's real services (api-server, scheduler, dag-processor, triggerer,
LocalExecutor) started by dev/stack.py, runs triggered through the REST API with params."""

from __future__ import annotations

import itertools
import re
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawler_ops.config import CrawlTaskConfig
from tests.integration.airflow_api import (
    RUN_TIMEOUT_S,
    AirflowApi,
    airflow_cli,
    backfill_runs,
    pause_when_idle,
    wait_for_first_scheduled_run,
    wait_until_idle,
)
from tests.integration.airflow_session import (
    SHANGHAI,
    TWICE_A_DAY,
    cancel_task,
    deferring_task,
    ops_task,
    window_backfill_task,
)
from tests.support import (
    DemoSource,
    create_topic,
    duplicated_offsets,
    duplicates,
    make_task,
    query,
    read_topic,
    run_record,
    verified,
    watermark,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_rest_triggers_with_params_drive_the_crawl(airflow, source_url, kafka_bootstrap, pg_uri, task_ids):
    task = task_ids["rest"]
    cfg = make_task(task)
    source = DemoSource(source_url)
    source.create(task, total=1_200, ref=datetime.now(UTC).replace(microsecond=0), in_window_share=0.5)

    rejected = airflow.trigger(cfg.dag_id, {"max_batches": 0})
    assert rejected.status_code == 400
    assert "max_batches" in rejected.text and "minimum of 1" in rejected.text

    create_topic(kafka_bootstrap, cfg.kafka.topic)  # a dry run creates no topic: read an existing one
    assert airflow.run(cfg.dag_id, {"dry_run": True})[1] == "success"
    assert read_topic(kafka_bootstrap, cfg.kafka.topic) == []
    assert watermark(pg_uri, task) is None

    assert airflow.run(cfg.dag_id, {"max_batches": 2})[1] == "success"
    assert len(source.page_requests(task)) >= 2
    assert {int(m.headers["source_offset"]) for m in read_topic(kafka_bootstrap, cfg.kafka.topic)} == set(
        range(1_000, 1_200)
    )

    # No logical date: the reference time is the run's run_after (kept in the run record).
    run_id, state = airflow.run(cfg.dag_id)
    assert state == "success"
    record = run_record(pg_uri, task)
    assert record["run_id"] == run_id
    truth = source.truth(task, record["ref_time"], days=7, tolerance_s=24 * 3600)
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert {m.key for m in messages} == set(truth["in_window_ids"])
    assert not duplicates(messages)
    assert watermark(pg_uri, task) == 1_200

    reset_id, state = airflow.run(cfg.dag_id, {"reset": True})
    assert state == "success"
    assert query(pg_uri, "SELECT mode FROM crawler_ops.crawl_run WHERE run_id = %s", reset_id) == [("first",)]
    assert watermark(pg_uri, task) == 1_200

    replay_id, state = airflow.run(cfg.dag_id, {"replay_from": 0, "replay_to": 300, "filter_days": 3650})
    assert state == "success"
    replayed = [m for m in read_topic(kafka_bootstrap, cfg.kafka.topic) if m.headers["run_id"] == replay_id]
    assert sorted(int(m.headers["source_offset"]) for m in replayed) == list(range(300))
    assert watermark(pg_uri, task) == 1_200
    assert query(pg_uri, "SELECT mode FROM crawler_ops.crawl_run WHERE run_id = %s", replay_id) == [("replay",)]


def wait_for_backfills(airflow: AirflowApi, dag_id: str) -> None:
    """Wait until every backfill of ``dag_id`` is marked complete (all its runs finished)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while any(
        b["completed_at"] is None for b in airflow.http.get("/backfills", params={"dag_id": dag_id}).json()["backfills"]
    ):
        assert time.monotonic() < deadline, f"a backfill of {dag_id} was never marked complete"
        time.sleep(1)


def wait_for_reruns(
    airflow: AirflowApi, pg_uri: str, dag_id: str, task: str, run_ids: list[str], since: datetime
) -> None:
    """Wait until the crawl record of every run in ``run_ids`` was restarted after ``since`` and closed; on a
    timeout, say which runs did not come back and what Airflow shows of them."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        rows = query(
            pg_uri,
            "SELECT run_id, status FROM crawler_ops.crawl_run"
            " WHERE task_id = %s AND run_id = ANY(%s) AND started_at > %s AND status <> 'running'",
            task,
            run_ids,
            since,
        )
        if {run_id for run_id, _ in rows} == set(run_ids):
            wait_until_idle(airflow, dag_id)
            return
        if time.monotonic() > deadline:
            states = {
                r["dag_run_id"]: r["state"]
                for r in airflow.http.get(f"/dags/{dag_id}/dagRuns", params={"limit": 100}).json()["dag_runs"]
            }
            raise AssertionError(f"re-run crawl records closed: {rows}; Airflow run states: {states}")
        time.sleep(1)


def backfill_two_days(
    airflow: AirflowApi, pg_uri: str, source: DemoSource, cfg: CrawlTaskConfig
) -> tuple[list[dict[str, Any]], int | None]:
    """After the task's first scheduled run (its window holds no data), with the source's request log cleared:
    ``airflow backfill create`` from 2026-10-05 to 2026-10-07, whose runs start at each fire between them (01:00 and
    10:00 UTC of two days), all successful. Returns the four runs and the watermark before them."""
    wait_for_first_scheduled_run(airflow, cfg.dag_id)
    before = watermark(pg_uri, cfg.id)
    source.clear_requests(cfg.id)
    created = airflow_cli(
        "backfill", "create", "--dag-id", cfg.dag_id, "--from-date", "2026-10-05", "--to-date", "2026-10-07"
    )
    assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
    runs = backfill_runs(airflow, cfg.dag_id, 4)
    assert [r["state"] for r in runs] == ["success"] * 4
    return runs, before


def test_backfill_publishes_each_interval_by_probing_and_leaves_the_watermark(
    airflow, source_url, kafka_bootstrap, pg_uri, task_ids
):
    task = task_ids["backfill"]
    cfg = make_task(task, schedule=TWICE_A_DAY, batch_size=500)
    source = DemoSource(source_url)

    runs, before = backfill_two_days(airflow, pg_uri, source, cfg)

    intervals = [
        (datetime.fromisoformat(r["data_interval_start"]), datetime.fromisoformat(r["data_interval_end"])) for r in runs
    ]
    assert intervals[0][0] == datetime(2026, 10, 5, 9, tzinfo=SHANGHAI)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(intervals)), f"gap or overlap: {intervals}"
    assert [(e - s).total_seconds() / 3600 for s, e in intervals] == [9, 15, 9, 15], "previous fire to this fire"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    bound = 0
    for run, (start, end) in zip(runs, intervals, strict=True):
        truth = source.ids_between(task, start, end)
        published = [m.key for m in messages if m.headers["run_id"] == run["dag_run_id"]]
        assert len(truth) > 300
        assert sorted(published) == sorted(truth), run["dag_run_id"]
        # A run reads its interval's records and one batch of margin each side, in batches of 500 (the
        # first and last batch partly outside): not a scan of the source's 20,000 records (40 pages a run).
        bound += -(-(len(truth) + 2 * 500) // 500) + 1
    pages = len(source.page_requests(task))
    assert pages <= bound < 3 * 20_000 // 500 // 4, f"probing bounds the reads ({pages} pages, at most {bound})"
    assert watermark(pg_uri, task) == before

    wait_for_backfills(airflow, cfg.dag_id)
    [(since,)] = query(pg_uri, "SELECT now()")
    again = airflow_cli(
        "backfill",
        "create",
        "--dag-id",
        cfg.dag_id,
        "--from-date",
        "2026-10-05",
        "--to-date",
        "2026-10-07",
        "--reprocess-behavior",
        "completed",
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    # The reprocessed runs keep their run ids: wait until each one's crawl record was started again and closed.
    wait_for_reruns(airflow, pg_uri, cfg.dag_id, task, [r["dag_run_id"] for r in runs], since)
    first = Counter(m.key for m in messages if m.headers["run_id"] in {r["dag_run_id"] for r in runs})
    second = Counter(
        m.key
        for m in read_topic(kafka_bootstrap, cfg.kafka.topic)
        if m.headers["run_id"] in {r["dag_run_id"] for r in runs}
    )
    assert second == first + first, "the same window publishes the same keys again"
    assert watermark(pg_uri, task) == before


def finished_runs(airflow: AirflowApi, dag_id: str, run_type: str) -> list[dict[str, Any]]:
    runs = airflow.http.get(f"/dags/{dag_id}/dagRuns", params={"run_type": run_type, "limit": 100}).json()
    return sorted((r for r in runs["dag_runs"] if r["state"] in ("success", "failed")), key=lambda r: r["run_after"])


def test_a_minutely_schedule_fires_twice_and_the_second_run_publishes_only_new_records(
    airflow, source_url, kafka_bootstrap, pg_uri, task_ids
):
    task = task_ids["minutely"]
    cfg = make_task(task, schedule="* * * * *")
    source = DemoSource(source_url)
    deadline = time.monotonic() + 150
    while not (first := finished_runs(airflow, cfg.dag_id, "scheduled")):
        assert time.monotonic() < deadline, "no scheduled run within 150 s"
        time.sleep(2)
    assert first[0]["state"] == "success"
    seen = {m.key for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}
    assert watermark(pg_uri, task) == 1_500
    source.append(task, 120)
    source.clear_requests(task)
    appended_at = datetime.now(UTC)

    def later_runs() -> list[dict[str, Any]]:
        return [
            r
            for r in finished_runs(airflow, cfg.dag_id, "scheduled")
            if datetime.fromisoformat(r["start_date"]) > appended_at
        ]

    while not (runs := later_runs()):
        assert time.monotonic() < deadline + 120, "no scheduled run after the append"
        time.sleep(2)

    assert runs[0]["state"] == "success"
    new = [m for m in read_topic(kafka_bootstrap, cfg.kafka.topic) if m.key not in seen]
    assert sorted(int(m.headers["source_offset"]) for m in new) == list(range(1_500, 1_620))
    assert all(r["offset"] >= 1_500 for r in source.page_requests(task)), "no old page fetched again"
    assert watermark(pg_uri, task) == 1_620


def test_an_executor_dag_runs_on_its_schedule_and_from_a_rest_trigger(airflow, pg_uri, task_ids):
    dag_id = f"exec_{task_ids['executor']}"
    deadline = time.monotonic() + 150
    while not finished_runs(airflow, dag_id, "scheduled"):
        assert time.monotonic() < deadline, "the executor's schedule did not fire"
        time.sleep(2)

    _run_id, state = airflow.run(dag_id)

    assert state == "success"
    # Pause the minutely schedule so no new run starts between listing the runs and counting the rows.
    pause_when_idle(airflow, dag_id)
    runs = finished_runs(airflow, dag_id, "scheduled") + finished_runs(airflow, dag_id, "manual")
    assert all(r["state"] == "success" for r in runs)
    counts = dict(query(pg_uri, f'SELECT status, count(*) FROM public."status_{task_ids["executor"]}" GROUP BY 1'))
    assert sum(counts.values()) == 46  # 上海市 has 46 districts in the demo table
    assert counts.get(2, 0) == min(10 * len(runs), 46), "each run processes cycle_index rows until none is left"


def test_a_trigger_while_a_run_is_active_waits_for_it(airflow, source_url, task_ids):
    dag_id = f"crawl_{task_ids['rest']}"
    source = DemoSource(source_url)
    source.faults(task_ids["rest"], latency_ms=3_000)  # the first run's count request alone takes 3 s
    try:
        first = airflow.trigger(dag_id, {"dry_run": True}).json()["dag_run_id"]
        second = airflow.trigger(dag_id, {"dry_run": True}).json()["dag_run_id"]
        assert airflow.wait_for(dag_id, first) == "success"
        assert airflow.wait_for(dag_id, second) == "success"
    finally:
        source.clear_faults(task_ids["rest"])

    runs = {r: airflow.http.get(f"/dags/{dag_id}/dagRuns/{r}").json() for r in (first, second)}
    first_end = datetime.fromisoformat(runs[first]["end_date"])
    assert datetime.fromisoformat(runs[second]["queued_at"]) < first_end, "triggered while the first was active"
    assert datetime.fromisoformat(runs[second]["start_date"]) >= first_end, "max_active_runs=1 held it until then"


# --------------------------------------------------------------------------- operations


def seed_status(pg_uri: str, task: str) -> None:
    """A stored state no run of this session produces: the endpoint must show exactly these values."""
    from crawler_ops.hooks.store.hook import CrawlStoreHook

    store = CrawlStoreHook("crawler_db", task)
    with store.transaction() as cur:
        store.ensure_schema(cur)
    store.close()
    query(
        pg_uri,
        "INSERT INTO crawler_ops.progress (task_id, watermark, total, last_start_offset, status, filtered_count, "
        "produced_count, last_run_id) VALUES (%s, 4321, 5000, 4200, 'incomplete', 40, 39, 'seeded-run') RETURNING 1",
        task,
    )
    query(
        pg_uri,
        "INSERT INTO crawler_ops.crawl_run (task_id, run_id, mode, ref_time, status, started_at, finished_at, fetched, "
        "kept, published) VALUES (%s, 'seeded-run', 'incremental', now(), 'success', now() - interval '5 seconds', "
        "now(), 100, 40, 39) RETURNING 1",
        task,
    )


def html_rows(page: str) -> list[list[str]]:
    """The cells of each row of the status page's table of tasks."""
    table = page.split('<table class="tasks">')[1].split("</table>")[0]
    return [re.findall(r'<td data-field="\w+">(.*?)</td>', row, re.S) for row in table.split("<tr") if "<td" in row]


def test_status_endpoint_in_the_api_server_needs_a_login_and_shows_the_stored_status(airflow, pg_uri, task_ids, stack):
    base = f"{airflow.url}/crawler-ops"
    task = task_ids["status"]
    seed_status(pg_uri, task)

    assert httpx.get(f"{base}/api/status", timeout=30).status_code == 401
    assert httpx.get(f"{base}/", timeout=30).status_code == 401
    assert httpx.get(f"{base}/docs", timeout=30).status_code in (401, 404)
    assert httpx.get(f"{base}/openapi.json", timeout=30).status_code in (401, 404)
    forged = httpx.get(f"{base}/api/status", headers={"Authorization": "Bearer not.a.jwt"}, timeout=30)
    assert forged.status_code in (401, 403)

    response = airflow.status(task=task, live="false")
    assert response.status_code == 200, response.text
    (row,) = response.json()["tasks"]
    assert (row["dag_id"], row["running"], row["active_runs"]) == (f"crawl_{task}", False, [])
    assert (row["watermark"], row["total"], row["progress"], row["status"]) == (4321, 5000, "86.4%", "incomplete")
    assert (row["filtered_count"], row["produced_count"], row["last_start_offset"]) == (40, 39, 4200)
    assert (row["last_run"]["run_id"], row["last_run"]["status"], row["last_run"]["published"]) == (
        "seeded-run",
        "success",
        39,
    )
    page = httpx.get(f"{base}/", params={"live": "false"}, headers=airflow.http.headers, timeout=60)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    (cells,) = [cells for cells in html_rows(page.text) if f">{task}</a><br>" in cells[0]]
    assert (cells[1], cells[2], cells[4], cells[6]) == ("no", "incomplete", "4321 (86.4%)", "40 / 39")
    assert cells[8].startswith("success (incremental, ") and "seeded-run" in cells[8]
    assert airflow.status(task="nope").status_code == 404

    plugins = airflow.http.get("/plugins").json()["plugins"]
    (plugin,) = [p for p in plugins if p["name"] == "crawler_ops"]
    assert plugin["external_views"][0]["href"] == "crawler-ops/"
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/crawler-ops"


def test_new_records_trigger_the_downstream_dag_through_the_asset_and_metrics_count_them(
    airflow, source_url, kafka_bootstrap, pg_uri, task_ids, statsd
):
    cfg = ops_task(task_ids["ops"])
    downstream = f"sample_{cfg.id}_downstream"
    source = DemoSource(source_url)
    source.create(cfg.id, total=900, ref=datetime.now(UTC).replace(microsecond=0), in_window_share=0.5)
    airflow.wait_for_dag(downstream)

    run_id, state = airflow.run(cfg.dag_id)
    assert state == "success"

    record = run_record(pg_uri, cfg.id)
    assert record["run_id"] == run_id and record["published"] > 0
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not (runs := finished_runs(airflow, downstream, "asset_triggered")):
        assert time.monotonic() < deadline, "the Asset event did not trigger the downstream DAG"
        time.sleep(2)
    assert runs[0]["state"] == "success"
    events = airflow.http.get(f"/dags/{downstream}/dagRuns/{runs[0]['dag_run_id']}/upstreamAssetEvents").json()
    (event,) = events["asset_events"]
    assert event["uri"] == cfg.kafka.asset_uri and event["extra"]["run_id"] == run_id
    assert event["extra"]["published"] == record["published"]
    status = airflow.status(task=cfg.id).json()
    group = status["tasks"][0]["kafka"]["groups"][f"{cfg.id}.downstream_sample"]
    assert group["lag"] == 0 and group["committed"] == len(read_topic(kafka_bootstrap, cfg.kafka.topic))

    for counter in ("fetched", "kept", "published", "expired"):
        assert statsd.counter(f"airflow.crawler_ops.{cfg.id}.{counter}") == record[counter], counter
    assert statsd.counter(f"airflow.crawler_ops.{cfg.id}.batches_done") == record["planned"]


def test_a_run_marked_failed_in_the_ui_is_closed_notified_and_the_next_run_continues(
    airflow, source_url, kafka_bootstrap, pg_uri, task_ids, webhook
):
    cfg = cancel_task(task_ids["cancel"])
    source = DemoSource(source_url)
    ref = datetime.now(UTC).replace(microsecond=0)
    source.create(cfg.id, total=3_000, ref=ref, in_window_share=1.0)
    source.faults(cfg.id, latency_ms=400)  # 30 pages, one at a time: the run is busy for ~12 s
    response = airflow.trigger(cfg.dag_id)
    assert response.status_code == 200, response.text
    run_id = response.json()["dag_run_id"]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not query(pg_uri, "SELECT 1 FROM crawler_ops.crawl_run WHERE run_id = %s AND pages >= 2", run_id):
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.5)
    (busy,) = airflow.status(task=cfg.id, live="false").json()["tasks"]
    assert (busy["running"], busy["active_runs"]) == (True, [run_id])
    assert (busy["last_run"]["run_id"], busy["last_run"]["status"]) == (run_id, "running")

    marked = airflow.http.patch(f"/dags/{cfg.dag_id}/dagRuns/{run_id}", json={"state": "failed"})
    assert marked.status_code == 200, marked.text

    while (record := run_record(pg_uri, cfg.id))["status"] == "running":
        assert time.monotonic() < deadline, "the listener did not close the run record"
        time.sleep(0.5)
    assert record["run_id"] == run_id and record["status"] == "failed" and record["finished_at"] is not None
    assert any("manually set to `failed`" in e for e in record["errors"])
    while not [r for r in webhook.requests if verified(r)["task"] == cfg.id]:
        assert time.monotonic() < deadline, "no failure notification"
        time.sleep(0.5)
    (request,) = [r for r in webhook.requests if verified(r)["task"] == cfg.id]
    body = verified(request)
    assert body["event"] == "run.failure" and body["summary"]["run_id"] == run_id
    assert body["summary"]["status"] == "failed"
    assert 200 <= body["summary"]["fetched"] < 3_000, "it got going (2 pages seen) and did not finish"
    assert watermark(pg_uri, cfg.id) is None, "the watermark moves only in a commit"

    source.clear_faults(cfg.id)
    _next_id, state = airflow.run(cfg.dag_id)
    assert state == "success"
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    assert {m.key for m in messages} == set(
        source.truth(cfg.id, run_record(pg_uri, cfg.id)["ref_time"], days=7)["in_window_ids"]
    )
    again = duplicated_offsets(messages)
    assert not again or set(again) <= set(range(again[0] // 100 * 100, again[0] // 100 * 100 + 100)), (
        "at most the one batch in flight is published twice"
    )
    assert watermark(pg_uri, cfg.id) == 3_000
    claimed = query(pg_uri, "SELECT count(*) FROM crawler_ops.batch_status WHERE task_name = %s AND status = 1", cfg.id)
    assert claimed == [(0,)], "claims the cancelled run's dying worker still took were given back at the next plan"
    assert [verified(r)["event"] for r in webhook.requests if verified(r)["task"] == cfg.id] == [
        "run.failure",
        "run.success",
    ]


def test_the_ui_connection_form_offers_the_http_type_source_connections_use(airflow):
    # The form's connection types come from the installed providers' hooks; a source connection is of type http.
    meta = airflow.http.get(f"{airflow.url}/ui/connections/hook_meta")

    assert meta.status_code == 200, meta.text[:300]
    types = {entry["connection_type"]: entry["hook_name"] for entry in meta.json()}
    assert types.get("http") == "HTTP", sorted(types)
    assert "kafka" in types and "postgres" in types


def test_airflow_backfill_create_reads_each_intervals_filtered_view_and_nothing_else(
    airflow, source_url, kafka_bootstrap, pg_uri, task_ids
):
    task = task_ids["window_backfill"]
    cfg = window_backfill_task(task)
    source = DemoSource(source_url)

    runs, before = backfill_two_days(airflow, pg_uri, source, cfg)

    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    pages = 0
    for run in runs:
        start, end = (datetime.fromisoformat(run[f"data_interval_{edge}"]) for edge in ("start", "end"))
        truth = source.ids_between(task, start, end)
        assert len(truth) > 300
        assert sorted(m.key for m in messages if m.headers["run_id"] == run["dag_run_id"]) == sorted(truth)
        pages += -(-len(truth) // cfg.batch_size)
    assert source.requests_seen(task) == {"count": 4, "list": pages}, "per run one filtered count and its pages"
    assert watermark(pg_uri, task) == before


def test_a_chunk_whose_source_pauses_defers_to_the_triggerer_frees_its_slots_and_resumes_exactly(
    airflow, source_url, kafka_bootstrap, pg_uri, task_ids
):
    """Every 6th page request answers 429 with Retry-After: 4, more than defer_after_s: the chunk defers (its pool
    slot is free while the triggerer waits) and resumes at its batch, until every batch is done."""
    task = task_ids["defer"]
    cfg = deferring_task(task)
    source = DemoSource(source_url)
    source.create(task, total=1_000, ref=datetime.now(UTC).replace(microsecond=0), in_window_share=1.0)
    source.faults(task, rate_limit_every=6, retry_after_s=4)

    response = airflow.trigger(cfg.dag_id)
    assert response.status_code == 200, response.text
    run_id = response.json()["dag_run_id"]
    instances = f"/dags/{cfg.dag_id}/dagRuns/{run_id}/taskInstances"
    deferred_in_pool: list[int] = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not deferred_in_pool and time.monotonic() < deadline:
        states = {ti["task_id"]: ti["state"] for ti in airflow.http.get(instances).json()["task_instances"]}
        if states.get("crawl_chunk") == "deferred":
            pool = airflow.http.get(f"/pools/{cfg.chunk_pool[0]}").json()
            deferred_in_pool.append(pool["deferred_slots"])
        time.sleep(0.2)
    assert deferred_in_pool and deferred_in_pool[0] >= 1, "the chunk deferred, outside its pool's running slots"

    state = airflow.wait_for(cfg.dag_id, run_id)
    assert state == "success", airflow.http.get(instances).json()
    entry = airflow.http.get(f"{instances}/crawl_chunk/xcomEntries/return_value", params={"map_index": 0})
    result = entry.json()["value"]
    assert result["deferrals"] >= 1 and result["batches_done"] == 10
    messages = read_topic(kafka_bootstrap, cfg.kafka.topic)
    truth = source.truth(task, run_record(pg_uri, task)["ref_time"], days=7, tolerance_s=24 * 3600)
    assert sorted(m.key for m in messages) == sorted(truth["in_window_ids"]) and len(messages) == 1_000
    assert not duplicates(messages)
    assert watermark(pg_uri, task) == 1_000
