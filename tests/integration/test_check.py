"""``crawler-ops check`` on the real stack, against the demo source: a healthy task (its sample message is the one a
crawl publishes), a wrong records path, dates the filter cannot read, a source serving newest first, the source
down, and a bearer token that is used and never printed."""

from __future__ import annotations

import json
import socket
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import jsonschema
import pytest

from crawler_ops.config import CrawlTaskConfig
from tests.integration.test_source_modes import MODES
from tests.support import DemoSource, cli, make_task, read_topic, write_config

pytestmark = pytest.mark.integration


def check(cfg: CrawlTaskConfig, folder: Path, *extra: str) -> tuple[int, dict[str, Any] | str, str]:
    """Run ``crawler-ops check`` on ``cfg`` as an operator would: its exit status, its JSON (or text) and stderr."""
    path = write_config(cfg, folder)
    done = cli("check", "--task", cfg.id, "--config", str(path), *extra)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout) if "--json" in extra else done.stdout, done.stderr


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def requests_made(source: DemoSource, task: str) -> int:
    return len(source._json("GET", f"/admin/tasks/{task}/requests")["requests"])


def test_a_healthy_task_passes_and_its_sample_message_is_what_a_crawl_publishes(
    source, kafka_bootstrap, unique_id, tmp_path, run_dag
):
    ref = now()
    source.create(unique_id, total=1_050, ref=ref, in_window_share=0.4)
    cfg = make_task(unique_id)

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 0, report
    assert isinstance(report, dict)
    assert report["problems"] == [] and report["exit_code"] == 0
    assert report["total"] == {"value": 1_050, "how": "count endpoint", "requests": 1}
    assert report["page"]["offsets"] == [950, 1_050] and report["page"]["records"] == 100
    assert report["keys"]["present"] == 100 and report["keys"]["unique"] is True
    assert report["order"]["verdict"] == "yes"
    assert report["order"]["evidence"]["lowest"]["offset"] == 0
    disorder = report["disorder"]
    assert disorder["records"] == 100 and 0 <= disorder["offsets"] < 100 and disorder["backfill_reads_all"] is True
    assert report["requests"] == 3 == requests_made(source, unique_id) + 1  # the count is not logged as a page
    truth = source.truth(unique_id, ref, days=cfg.filter.days, tolerance_s=0)["in_window_count"]
    low, high = report["first_crawl"]["records_in_window"]
    assert low <= truth <= high, (low, truth, high)

    schema = report["schema"]
    assert schema["records"] == 100 and schema["before_transform"] is False
    for record in source.records(unique_id, 950, 100):  # every record of the page fits both inferred schemas
        jsonschema.validate(record, schema["json_schema"])
        fastavro.validation.validate(record, fastavro.parse_schema(schema["avro"]), raise_errors=True)
    assert {"id", "aae397", "Collect_time"} <= set(schema["json_schema"]["properties"])

    sample = report["sample_message"]
    assert run_dag(cfg, ref) == "success"
    offset = dict(sample["headers"])["source_offset"]
    published = [m for m in read_topic(kafka_bootstrap, cfg.kafka.topic) if m.headers["source_offset"] == offset]
    assert len(published) == 1, f"no message for offset {offset}"
    assert sample["topic"] == cfg.kafka.topic
    assert sample["key"] == published[0].key
    assert json.loads(sample["value"]) == published[0].value
    crawled = {**published[0].headers, "run_id": "check"}  # a crawl's headers carry its run id
    assert dict(sample["headers"]) == crawled


def test_a_wrong_records_path_fails_and_suggests_the_right_one(source, unique_id, tmp_path):
    source.create(unique_id, total=500, ref=now())
    cfg = make_task(unique_id, source={"records_path": "data.items"})

    code, text, _ = check(cfg, tmp_path)

    assert code == 1, text
    fix = [line for line in str(text).splitlines() if line.strip().startswith("FIX")]
    assert len(fix) == 1 and "no list at records_path 'data.items'" in fix[0], text
    assert "'data.data' (100 records)" in fix[0], text


def test_dates_the_filter_cannot_read_fail_the_check(source, unique_id, tmp_path):
    source.create(unique_id, total=500, ref=now())
    cfg = make_task(unique_id, filter={"date_fields": ["published_at", "title"]})

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 1
    assert isinstance(report, dict)
    assert any("no record has a date" in problem for problem in report["problems"]), report["problems"]
    title = report["dates"]["fields"][1]
    assert (title["present"], title["parsed"], title["unparsed"]) == (100, 0, 100)
    assert report["order"]["verdict"] == "unknown"


def test_a_source_serving_newest_first_fails_the_check(source, unique_id, tmp_path):
    source.create(unique_id, total=1_000, ref=now(), order="newest_first")
    cfg = make_task(unique_id)

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 1
    assert isinstance(report, dict)
    assert report["order"]["verdict"] == "no", report["order"]
    assert any("dates do not grow with the offset" in problem for problem in report["problems"])
    lowest, highest = report["order"]["evidence"]["lowest"], report["order"]["evidence"]["highest"]
    assert lowest["offset"] == 0 and lowest["date"] > highest["date"]


def test_the_source_down_exits_2_with_a_clear_message(unique_id, tmp_path, monkeypatch):
    with socket.socket() as probe:  # a local port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conn = {"conn_type": "http", "host": "127.0.0.1", "port": port, "schema": "http"}
    monkeypatch.setenv(f"AIRFLOW_CONN_DOWN_{unique_id.upper()}", json.dumps(conn))
    cfg = make_task(unique_id, source={"conn_id": f"down_{unique_id}", "max_retries": 0})

    code, text, errors = check(cfg, tmp_path)

    assert code == 2, text
    assert f"127.0.0.1:{port}" not in text or "ERROR" in errors
    assert "ERROR" in errors and f"task {unique_id}" in errors and "ConnectError" in errors, errors

    code, report, _ = check(cfg, tmp_path, "--json")
    assert code == 2 and isinstance(report, dict) and report["exit_code"] == 2 and "ConnectError" in report["error"]


def test_a_bearer_token_is_used_and_never_printed(source, source_url, unique_id, tmp_path, monkeypatch):
    token = f"token-{uuid.uuid4().hex}"
    source.create(unique_id, total=300, ref=now(), in_window_share=1.0, auth={"type": "bearer", "token": token})
    host, port = source_url.removeprefix("http://").split(":")
    conn_id = f"auth_{unique_id}"

    def connect(password: str) -> None:
        conn = {"conn_type": "http", "host": host, "port": int(port), "schema": "http", "password": password}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))

    cfg = make_task(unique_id, source={"conn_id": conn_id, "auth": {"type": "bearer"}})
    connect(token)
    for extra in ((), ("--json",)):
        code, out, errors = check(cfg, tmp_path, *extra)
        assert code == 0, out
        assert token not in str(out) + errors

    wrong = f"wrong-{uuid.uuid4().hex}"
    connect(wrong)
    code, out, errors = check(cfg, tmp_path)
    assert code == 2 and "401" in errors, errors
    assert wrong not in str(out) + errors and token not in str(out) + errors


def test_the_estimate_brackets_a_window_that_starts_in_the_middle(source, unique_id, tmp_path):
    """A window starting far below the newest page: the records in it are estimated from the dates' density, and
    the range holds the source's own count of them."""
    ref = now()
    source.create(unique_id, total=20_000, ref=ref - timedelta(hours=1), in_window_share=0.25, window_days=7)
    cfg = make_task(unique_id, filter={"days": 3})

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 0 and isinstance(report, dict), report
    truth = source.truth(unique_id, ref, days=3, tolerance_s=0)["in_window_count"]
    low, high = report["first_crawl"]["records_in_window"]
    assert low <= truth <= high, (low, truth, high)
    assert report["first_crawl"]["requests"][0] >= 1 + -(-low // cfg.batch_size)


@pytest.mark.parametrize("mode", ["page-with-fixed-size", "post-search-by-page", "offset-without-count"])
def test_each_paging_mode_is_checked_through_its_own_requests(mode, source, unique_id, tmp_path):
    """Page numbers, a POST search and a source without a count endpoint: the total (probed without a count), the
    newest page (a page paginator's newest page, partial here) and the order, through the mode's own requests."""
    paging, source_section, expected = MODES[mode]
    source.create(unique_id, total=2_050, ref=now(), in_window_share=0.5, paging=paging)
    cfg = make_task(unique_id, source=source_section)

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 0 and isinstance(report, dict), report
    probed = not paging.get("count", True)
    assert report["total"]["value"] == 2_050
    assert report["total"]["how"] == ("probed: no count endpoint" if probed else "count endpoint")
    aligned = cfg.source.paginator.aligned
    assert report["page"]["offsets"] == ([2_000, 2_050] if aligned else [1_950, 2_050])
    assert report["page"]["records"] == (50 if aligned else 100)
    assert report["order"]["verdict"] == "yes"
    logged = source._json("GET", f"/admin/tasks/{unique_id}/requests")["requests"]
    assert logged and all(expected.items() <= r.items() for r in logged), logged
    assert report["requests"] == (report["total"]["requests"] + 2)


def test_the_cli_runs_the_tasks_transform_and_the_status_view_does_not(source, unique_id, tmp_path):
    """The sample message is the transform's output from the command line; in the status view (the api-server runs
    no task code) it is the record as sent, with a note naming the transform."""
    from crawler_ops.ops.check import check_within

    source.create(unique_id, total=300, ref=now(), in_window_share=1.0)
    cfg = make_task(unique_id, transform="crawler_ops.transforms.job_posting")

    code, report, _ = check(cfg, tmp_path, "--json")
    assert code == 0 and isinstance(report, dict), report
    transformed = json.loads(report["sample_message"]["value"])
    assert "description" not in transformed and "note" not in report["sample_message"]
    assert report["schema"]["before_transform"] is True, "the schema is of the records as the source sends them"
    assert "description" in report["schema"]["json_schema"]["properties"]

    in_view = check_within(cfg, 30.0)["sample_message"]
    assert "description" in json.loads(in_view["value"])
    assert "crawler_ops.transforms.job_posting" in in_view["note"]
    assert in_view["key"] == report["sample_message"]["key"]


@pytest.mark.parametrize("kind", ["cursor", "link_header"])
def test_a_feed_is_checked_on_its_first_page_newest_first_with_the_next_position(
    source, kafka_bootstrap, unique_id, tmp_path, run_dag, kind
):
    from tests.integration.test_source_feeds import feed_requests, feed_task, positions

    ref = now()
    source.create(unique_id, total=1_050, ref=ref, in_window_share=1.0, feed={"next": kind})
    cfg = feed_task(unique_id, kind)

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 0, report
    assert isinstance(report, dict)
    assert report["total"]["value"] is None and "feed" in report["total"]["how"]
    assert report["page"]["records"] == cfg.batch_size
    assert report["page"]["next"], "the position of the second page"
    assert report["order"]["verdict"] == "yes", "the demo feed lists its newest records first"
    assert positions(feed_requests(source, unique_id)) == [None], "one request: the first page"
    assert report["schema"]["records"] == cfg.batch_size, "the schema of the feed's first page"

    evidence = report["order"]["evidence"]
    first, last = evidence["first_listed"], evidence["last_listed"]
    assert (first["listed"], last["listed"]) == (1, 100) and first["date"] > last["date"], "labelled as listed"
    assert evidence["rising_steps"] > evidence["falling_steps"], "older down the page"

    sample = report["sample_message"]
    assert run_dag(cfg, ref) == "success"
    published = {m.key: m for m in read_topic(kafka_bootstrap, cfg.kafka.topic)}
    crawled = published[sample["key"]]
    assert json.loads(sample["value"]) == crawled.value, "the message a crawl publishes for that record"
    assert dict(sample["headers"])["source_offset"] == crawled.headers["source_offset"], "and its headers"
    text_code, text, _ = check(cfg, tmp_path)
    assert text_code == 0 and "  next       " in str(text)
    assert "steps older down the page" in str(text) and "listed 1 " in str(text)


def test_a_window_filter_task_is_estimated_from_the_sources_count_of_the_window(source, unique_id, tmp_path):
    """A first crawl of a source with a window filter counts the window; the check does too, and its estimate is
    exact: the window's records by the source's own count, one request to find the window's start."""
    from tests.integration.test_source_window import WINDOW_FILTER

    ref = now()
    source.create(unique_id, total=5_000, ref=ref - timedelta(hours=1), in_window_share=0.3)
    cfg = make_task(unique_id, source={"window_filter": WINDOW_FILTER})

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 0 and isinstance(report, dict), report
    truth = source.truth(unique_id, ref, days=cfg.filter.days, tolerance_s=0)["in_window_count"]
    estimate = report["first_crawl"]
    assert report["window_count"] == {"value": truth, "requests": 1}
    assert estimate["records_in_window"] == [truth, truth] and estimate["exact"] is True
    assert "window_filter" in estimate["basis"]
    assert report["requests"] == report["total"]["requests"] + 3, "count, newest page, oldest record, window count"


def test_a_registry_task_is_told_whether_the_page_fits_the_schema_the_next_plan_writes_with(
    source, unique_id, tmp_path, run_dag
):
    ref = now()
    source.create(unique_id, total=300, ref=ref, in_window_share=1.0)
    cfg = make_task(unique_id, kafka={"value_format": "avro"})

    code, report, _ = check(cfg, tmp_path, "--json")
    assert code == 0, report
    assert isinstance(report, dict)
    registry = report["registry"]
    assert registry["subject"] == f"test.{unique_id}-value" and registry["latest"] is None
    assert registry["schema"].startswith("new subject") and (registry["records"], registry["misfits"]) == (100, 0)

    assert run_dag(cfg, ref) == "success"
    source.faults(unique_id, set_fields={"bonus": 5})
    code, text, _ = check(cfg, tmp_path)
    assert code == 1, text
    assert "registry   avro under " in text and "version 1 (id " in text and "0 of 100 page records fit" in text
    assert "field 'bonus' is not in the schema (100 of 100 records): the next plan fails" in text


@pytest.mark.parametrize(
    "shape", ["bare-list-total-header", "json-lines", "feed-has-more", "feed-json-lines-header-cursor"]
)
def test_each_answer_shape_is_checked_as_its_crawl_reads_it(shape, source, unique_id, tmp_path):
    """A bare list with its total in a header, JSON Lines, a feed whose last page says has_more false: the check finds
    the records, the total and the next position where the crawl does."""
    from tests.integration.test_source_shapes import SHAPES, shaped_task

    options, _ = SHAPES[shape]
    source.create(unique_id, total=150, ref=now(), in_window_share=1.0, **options)
    cfg = shaped_task(unique_id, shape)

    code, report, _ = check(cfg, tmp_path, "--json")

    assert code == 0 and isinstance(report, dict), report
    assert report["order"]["verdict"] == "yes" and report["keys"]["unique"] is True
    if "feed" in options:
        assert report["page"]["records"] == 100 and report["page"]["next"], "a second page named"
        return
    assert report["page"]["records"] == 100 and report["page"]["offsets"] == [50, 150]
    header = cfg.source.total_header
    assert report["total"]["value"] == 150
    assert report["total"]["how"] == (f"header {header} of the count answer" if header else "count endpoint")


def test_a_bare_list_with_the_default_records_path_fails_and_suggests_the_body_itself(source, unique_id, tmp_path):
    source.create(unique_id, total=300, ref=now(), paging={"body": "list"})
    cfg = make_task(unique_id)

    code, text, _ = check(cfg, tmp_path)

    assert code == 1, text
    fix = [line for line in str(text).splitlines() if line.strip().startswith("FIX")]
    assert len(fix) == 1 and "no list at records_path 'data.data'" in fix[0] and "'' (100 records)" in fix[0], text
    assert "(suggested: '')" in str(text)


def test_a_json_lines_body_read_as_json_fails_at_once_naming_records_format(source, unique_id, tmp_path):
    source.create(unique_id, total=300, ref=now(), paging={"body": "jsonl"})
    cfg = make_task(unique_id)

    code, text, err = check(cfg, tmp_path)

    said = str(text) + err
    assert code == 2, said
    assert "is JSON Lines" in said and "source.records_format: jsonl" in said
    logged = source._json("GET", f"/admin/tasks/{unique_id}/requests")["requests"]
    assert len(logged) == 1, "not retried: retrying would not change it"
