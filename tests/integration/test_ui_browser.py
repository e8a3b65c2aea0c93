"""The Airflow UI in a real browser (Debian's headless Chromium driven by Playwright): log in with the stack's
generated admin password, find a crawl DAG, its grid and trigger form, and the crawl status the plugin frames in
the UI (Browse -> Crawler status and the DAG's tab), whose numbers must be PostgreSQL's.

Screenshots of each step are saved in tests/screenshots/ (git-ignored)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.airflow_api import AirflowApi
from tests.support import DemoSource, make_task, query

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "tests" / "screenshots"
# A slow, shared machine: the UI's first load compiles nothing but fetches a lot, and the status view asks every
# task's source and Kafka; waits are for selectors, each up to this long.
TIMEOUT_MS = 90_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    from browser import chromium

    with sync_playwright() as playwright:
        # Root cannot use Chromium's sandbox; the pages are the local Airflow's own.
        launched = playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def crawled(airflow: AirflowApi, source_url: str, pg_uri: str, task_ids: dict[str, str]) -> dict[str, Any]:
    """The session's UI task crawled once through the REST API; its stored progress."""
    task = task_ids["ui"]
    DemoSource(source_url).create(task, total=1_200, ref=datetime.now(UTC).replace(microsecond=0), in_window_share=0.5)
    dag_id = make_task(task).dag_id
    assert airflow.run(dag_id)[1] == "success"
    ((watermark, filtered, produced),) = query(
        pg_uri, "SELECT watermark, filtered_count, produced_count FROM crawler_ops.progress WHERE task_id = %s", task
    )
    assert watermark == 1_200 and produced > 0
    return {"task": task, "dag_id": dag_id, "watermark": watermark, "filtered": filtered, "produced": produced}


@pytest.fixture
def page(browser: Any, airflow: AirflowApi) -> Iterator[Any]:
    """A browser tab logged into the api-server with the stack's admin login."""
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    tab.goto(f"{airflow.url}/")
    user, password = airflow.login
    tab.locator("input[name=username]").fill(user)
    tab.locator("input[name=password]").fill(password)
    tab.locator("button[type=submit]").click()
    tab.get_by_role("button", name="Browse").wait_for()
    yield tab
    context.close()


def shot(tab: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    tab.screenshot(path=str(path), full_page=True)
    return path


def check_status_frame(frame: Any, crawled: dict[str, Any]) -> None:
    """The framed status view shows the task's stored watermark and counts, and its charts."""
    row = frame.locator(f'tr[data-task="{crawled["task"]}"]')
    row.locator('td[data-field="watermark"]').wait_for()
    watermark = row.locator('td[data-field="watermark"]').inner_text()
    assert re.fullmatch(rf"{crawled['watermark']} \(\d+\.\d%\)", watermark), watermark
    counts = row.locator('td[data-field="filtered_produced"]').inner_text()
    assert counts == f"{crawled['filtered']} / {crawled['produced']}"
    section = frame.locator(f'section.task[data-task="{crawled["task"]}"]')
    for chart in ("records_per_s", "kept_published", "backlog"):
        svg = section.locator(f'svg.chart[data-chart="{chart}"]')
        svg.wait_for()
        assert svg.locator("circle.point").count() >= 1, chart


def test_the_ui_shows_the_crawl_dag_its_trigger_params_and_its_crawl_status(page, airflow, crawled, pg_uri):
    dag_id = crawled["dag_id"]

    page.goto(f"{airflow.url}/dags")
    page.get_by_placeholder(re.compile("Search Dags", re.I)).fill(dag_id)
    page.get_by_role("link", name=dag_id, exact=True).first.wait_for()
    shot(page, "1-dag-list")

    page.goto(f"{airflow.url}/dags/{dag_id}")  # the grid is the DAG page's left panel
    for step in ("plan", "commit", "announce"):
        page.get_by_role("link", name=step, exact=True).wait_for()
    page.get_by_role("link", name=re.compile(r"^crawl_chunk")).wait_for()
    shot(page, "2-dag-grid")

    page.locator("button", has_text="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Run Parameters").wait_for()
    for param in ("dry_run", "max_batches", "skip_parked"):  # a required param's label ends in "*"
        dialog.get_by_text(re.compile(rf"^{param}\b")).first.wait_for()
    shot(page, "3-trigger-form")
    page.keyboard.press("Escape")

    page.goto(f"{airflow.url}/dags/{dag_id}/plugin/crawler_ops_dag_status")
    tab = page.frame_locator('iframe[title="Crawl status"]')
    check_status_frame(tab, crawled)
    assert tab.locator("tr[data-task]").count() == 1, "the DAG's tab shows only its own task"
    shot(page, "4-dag-tab-crawl-status")

    page.goto(f"{airflow.url}/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Crawler status").click()
    nav = page.frame_locator('iframe[title="Crawler status"]')
    check_status_frame(nav, crawled)
    shot(page, "5-browse-crawler-status")

    page.goto(f"{airflow.url}/dags/crawler_ops_maintenance/plugin/crawler_ops_dag_status")
    other = page.frame_locator('iframe[title="Crawl status"]')
    other.get_by_text("is not a crawl or executor DAG").wait_for()


def test_check_source_on_the_dags_tab_runs_the_check_and_shows_its_report(page, airflow, crawled):
    """The Crawl status tab's "Check source" asks the task's source from the api-server (the task's own connection,
    auth and rate limit) and shows the report: the total the crawl saw, no problem, a sample message."""
    page.goto(f"{airflow.url}/dags/{crawled['dag_id']}/plugin/crawler_ops_dag_status")
    tab = page.frame_locator('iframe[title="Crawl status"]')
    tab.get_by_test_id("check-source").click()

    verdict = tab.get_by_test_id("check-verdict")
    verdict.wait_for()
    report = tab.get_by_test_id("check-report").inner_text()
    assert verdict.get_attribute("data-exit-code") == "0", report
    assert f"total      {crawled['watermark']} (count endpoint)" in report, report
    assert "order      yes" in report, report
    sample = tab.get_by_test_id("check-sample").inner_text()
    assert f"crawl_task: {crawled['task']}" in sample and '"id": ' in sample, sample
    shot(page, "6-dag-tab-check-source")
