"""Test harness: point Airflow and the tests at the local stack (started by dev/stack.py when needed).

The environment is chosen in ``pytest_configure``, before any test module imports Airflow:

- a session that collects only service-free tests (``tests/unit``, ``tests/dev``, ``tests/dags``) gets a private,
  empty Airflow home and none of the stack's connections, so it needs no stack and cannot touch one;
- any other session loads the stack's environment (AIRFLOW_HOME, the AIRFLOW_CONN_* connections).

Either way the process environment is restored when the session ends. The ``stack`` fixture starts the stack
(idempotently) the first time an integration test needs it. A session on the stack removes, when it ends (also after
failures), the DAGs its tests created in Airflow's metadata DB (see :mod:`tests.airflow_cleanup`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from tests import namespace

if TYPE_CHECKING:
    from crawler_ops.config import CrawlTaskConfig, ExecutorTaskConfig
    from tests.support import DemoSource, Receiver, SourceProxy

# Property tests judge what the code does, never how fast: on a loaded machine (two pytest workers, Kafka, PostgreSQL
# and the source on two cores) Hypothesis's timing checks failed correct code, so its deadline and its "input
# generation is slow" health check are off. The other health checks (a strategy that filters out most of its
# examples, or generates too much data) still fail a test.
settings.register_profile("crawler_ops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("crawler_ops")

REPO = Path(__file__).resolve().parent.parent
STACK_DIR = Path(os.environ.get("CRAWLER_OPS_STACK_DIR", REPO / ".stack")).resolve()
STATE_FILE = STACK_DIR / "stack.json"
SERVICE_FREE = ("unit", "dev", "dags")
# Tests on PostgreSQL and Kafka only (the mutation run's): they create nothing in Airflow.
AIRFLOW_FREE = (*SERVICE_FREE, "integration/logic")
# What a developer's shell may carry over from the stack's env.sh; service-free sessions drop it.
STACK_VARIABLE_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW__", "CRAWLER_OPS_")

_saved_environ: dict[str, str] = {}
_private_home: str | None = None
_on_stack = False
_cleans_airflow = False


def load_stack_env() -> bool:
    try:
        env = json.loads(STATE_FILE.read_text())["env"]
    except (OSError, ValueError, KeyError):
        return False
    os.environ.update(env)
    return True


def needs_stack(args: list[str], free: tuple[str, ...] = SERVICE_FREE) -> bool:
    """Whether any test path of the session lies outside the ``free`` folders (by default the service-free ones)."""
    roots = [REPO / "tests" / name for name in free]
    for arg in args or ["tests"]:
        path = Path(arg.split("::")[0]).resolve()
        if not any(path == root or root in path.parents for root in roots):
            return True
    return False


def pytest_configure(config: pytest.Config) -> None:
    global _private_home, _on_stack, _cleans_airflow
    _saved_environ.update(os.environ)
    if needs_stack(list(config.args)):
        _on_stack = True
        _cleans_airflow = needs_stack(list(config.args), AIRFLOW_FREE)
        load_stack_env()
        return
    for name in [n for n in os.environ if n.startswith(STACK_VARIABLE_PREFIXES)]:
        del os.environ[name]
    _private_home = tempfile.mkdtemp(prefix="crawler-ops-airflow-home-")
    # No DAG file parse timeout: a parse's time depends on the machine's load, what it builds is what is tested.
    os.environ.update(
        {
            "AIRFLOW_HOME": _private_home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "0",
        }
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    os.environ.clear()
    os.environ.update(_saved_environ)
    if _private_home is not None:
        shutil.rmtree(_private_home, ignore_errors=True)


def say(request: pytest.FixtureRequest, message: str) -> None:
    """A line on the terminal, also while output is captured."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\n" + message)


@pytest.fixture(scope="session", autouse=True)
def airflow_metadata_cleanup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """At the end of a session on the stack, whatever its outcome: delete from Airflow's metadata DB the DAGs of
    the configs the tests wrote (all below the session's temp folder), never a configured one, and the runs
    ``dag.test()`` made of configured DAGs. Set first, so it runs after every other session fixture (the scheduler
    tests' Airflow is stopped by then)."""
    if not _cleans_airflow:
        yield
        return
    from tests import airflow_cleanup

    temp_root = tmp_path_factory.getbasetemp()
    stack_config = os.environ.get("CRAWLER_OPS_CONFIG")
    protected = airflow_cleanup.configured_dag_ids([Path(stack_config)] if stack_config else [])
    try:
        runs_after: int | None = airflow_cleanup.last_run_id()
    except Exception as exc:  # noqa: BLE001 - the metadata DB may not be up yet; DAGs are still cleaned
        say(request, f"Airflow cleanup: cannot read the metadata DB now ({exc}); test runs of configured DAGs stay")
        runs_after = None
    yield
    try:
        report = airflow_cleanup.clean_metadata_db(
            airflow_cleanup.session_dag_ids(temp_root), protected, temp_root, runs_after
        )
    except Exception as exc:  # noqa: BLE001 - a cleanup problem must not hide the tests' own outcome
        say(request, f"Airflow cleanup failed: {type(exc).__name__}: {exc}")
        return
    say(
        request,
        f"Airflow cleanup: deleted {len(report.deleted)} test DAGs, {report.test_runs_deleted} test runs of "
        f"configured DAGs, {report.import_errors_deleted} import errors"
        + (f"; failed: {'; '.join(report.failures)}" if report.failures else ""),
    )


@pytest.fixture(scope="session", autouse=True)
def namespace_cleanup(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of a session on the stack, whatever its outcome: remove from PostgreSQL, Kafka and the demo
    source and the schema registry whatever carries the session's tag (:mod:`tests.namespace`)."""
    yield
    if not _on_stack or not STATE_FILE.exists():
        return
    env = json.loads(STATE_FILE.read_text()).get("env", {})
    cleaned = namespace.clean(
        env.get("CRAWLER_OPS_PG_URI"),
        env.get("CRAWLER_OPS_KAFKA_BOOTSTRAP"),
        env.get("CRAWLER_OPS_SOURCE_URL"),
        env.get("CRAWLER_OPS_REGISTRY_URL"),
    )
    say(request, f"Namespace {namespace.TAG} cleanup: {cleaned}")


@pytest.fixture(autouse=True)
def no_sleep_in_a_transaction() -> Iterator[None]:
    """Fails a test whose crawler_ops code slept with a PostgreSQL transaction open (tests/held_sleeps.py)."""
    from tests import held_sleeps

    held_sleeps.install()
    held_sleeps.take()
    yield
    found = held_sleeps.take()
    assert not found, "sleeping with a transaction open (its row locks held):\n" + "\n".join(found)


@pytest.fixture(autouse=True)
def process_state() -> Iterator[None]:
    """Each test leaves the process as the session set it up: the environment is restored after it, and the
    process-wide caches that carry state from one call to the next (the sources' limiters and OAuth2 tokens, the
    status view's answers) start empty for the next test, in the modules that are loaded."""
    environ = dict(os.environ)
    yield
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    for name, value in environ.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    ratelimit = sys.modules.get("crawler_ops.hooks.source.ratelimit")
    if ratelimit is not None:
        ratelimit.reset_limiters()
    tokens = sys.modules.get("crawler_ops.hooks.source.tokens")
    if tokens is not None:
        tokens.reset_tokens()
    web = sys.modules.get("crawler_ops.ops.web")
    if web is not None:
        web.REPORTS = web.ReportCache()
    loading = sys.modules.get("crawler_ops.config.loading")
    if loading is not None:
        loading._current = None  # the config the api-server keeps: each test writes its own


@pytest.fixture(scope="session")
def stack() -> dict[str, str]:
    """The running local stack's environment; starts it (idempotently) when it is not up."""
    status = subprocess.run([sys.executable, str(REPO / "dev" / "stack.py"), "status"], capture_output=True)
    if status.returncode != 0:
        subprocess.run([sys.executable, str(REPO / "dev" / "stack.py"), "up"], check=True)
    assert load_stack_env(), f"dev/stack.py up did not write {STATE_FILE}"
    return json.loads(STATE_FILE.read_text())["env"]


@pytest.fixture(scope="session")
def stack_state(stack: dict[str, str]) -> dict[str, Any]:
    """The whole state file of the running stack (ports, env, and Airflow's URL once it is up)."""
    return json.loads(STATE_FILE.read_text())


@pytest.fixture
def unique_id() -> str:
    """A name no other test uses, in the session's namespace (:mod:`tests.namespace`): task ids, topics, tables
    and demo data sets are derived from it, and the session removes them at its end."""
    return namespace.unique_name()


@pytest.fixture(scope="session")
def source_url(stack: dict[str, str]) -> str:
    return stack["CRAWLER_OPS_SOURCE_URL"]


@pytest.fixture(scope="session")
def kafka_bootstrap(stack: dict[str, str]) -> str:
    return stack["CRAWLER_OPS_KAFKA_BOOTSTRAP"]


@pytest.fixture(scope="session")
def kafka_data_dir(stack: dict[str, str]) -> Path:
    """The single broker's log directory (its topics' segment files)."""
    return STACK_DIR / "kafka" / "data"


@pytest.fixture(scope="session")
def pg_uri(stack: dict[str, str]) -> str:
    """The crawler database, with its ``crawler_ops`` schema in place as after any first crawl (a test that reads
    progress before crawling anything must not depend on another test having crawled first)."""
    import psycopg

    from crawler_ops.hooks.store.db import create_schema

    with psycopg.connect(stack["CRAWLER_OPS_PG_URI"], autocommit=True) as conn, conn.cursor() as cur:
        create_schema(cur)
    return stack["CRAWLER_OPS_PG_URI"]


@pytest.fixture
def source(source_url: str) -> DemoSource:
    """Admin client of the demo source API."""
    from tests.support import DemoSource

    return DemoSource(source_url)


@pytest.fixture
def source_proxy(source_url: str, monkeypatch: pytest.MonkeyPatch, unique_id: str) -> Iterator[SourceProxy]:
    """A :class:`tests.support.SourceProxy` in front of the demo source, as the connection ``proxy_<unique id>``."""
    from tests.support import SourceProxy

    proxy = SourceProxy(source_url, f"proxy_{unique_id}")
    monkeypatch.setenv(f"AIRFLOW_CONN_{proxy.conn_id.upper()}", proxy.connection())
    yield proxy
    proxy.close()


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch, unique_id: str) -> Iterator[Receiver]:
    """A webhook receiver (:class:`tests.support.Receiver`), as the connection ``hook_<unique id>`` whose secret is
    the one :func:`tests.support.verified` checks."""
    from tests.support import Receiver

    hook = Receiver()
    conn = {"conn_type": "http", "host": hook.url, "password": "s3cret-秘密"}
    monkeypatch.setenv(f"AIRFLOW_CONN_HOOK_{unique_id.upper()}", json.dumps(conn))
    yield hook
    hook.server.shutdown()


@pytest.fixture
def pg_schema(pg_uri: str, unique_id: str) -> Iterator[str]:
    """A fresh PostgreSQL schema for one test, dropped afterwards."""
    import psycopg

    name = f"test_{unique_id}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def use_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[[CrawlTaskConfig | ExecutorTaskConfig, str], Path]:
    """Write a task as the only entry of a YAML config section and point $CRAWLER_OPS_CONFIG at it (restored
    after the test)."""
    from tests.support import write_config

    def use(cfg: CrawlTaskConfig | ExecutorTaskConfig, section: str = "tasks") -> Path:
        path = write_config(cfg, tmp_path, section)
        monkeypatch.setenv("CRAWLER_OPS_CONFIG", str(path))
        return path

    return use


@pytest.fixture
def run_dag(use_config: Callable[[CrawlTaskConfig, str], Path], stack: dict[str, str]) -> Callable[..., str]:
    """Run a task's crawl DAG once in-process with ``dag.test()``; returns the DagRun state.

    ``dag.test()`` serialises the DAGs of the dags folder, so the task is written to a config file that the
    folder's DAG file reads; the tasks then run in this process. The run id is ``manual__<run_after>``: a run
    given the ``run_after`` and logical date of an earlier one replaces it, as clearing that run would.
    """

    def run(cfg: CrawlTaskConfig, ref: Any, conf: dict[str, Any] | None = None, run_after: Any = None) -> str:
        from crawler_ops.factory.crawl import build_crawl_dag

        use_config(cfg, "tasks")
        dag = build_crawl_dag(cfg)
        return str(dag.test(logical_date=ref, run_conf=conf or {}, run_after=run_after).state)

    return run


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Tests on Airflow's services on one worker (tests/xdist_airflow.py); every other test wherever there is room."""
    from tests.xdist_airflow import make_scheduler

    return make_scheduler(config, log)
