"""Command line ``crawler-ops`` (or ``python -m crawler_ops``): ``status [--task ID | --executor NAME] [--json]
[--no-live]``, ``validate [CONFIG]``, ``schema``, ``config-reference``, ``skip-batch --task ID --offset O``,
``unpark --executor NAME [--id ID ...]``, ``dag-shards N [--dags-folder DIR]``, ``import-progress FILE [--apply]
[--force]`` and ``check --task ID [--json] [--config PATH]``.

Run it where the DAGs run (same ``AIRFLOW_CONN_*`` connections, same ``CRAWLER_OPS_CONFIG``); ``make`` installs
the ``crawler-ops`` command into the project's virtualenv, and ``make status`` runs it on the local stack.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from crawler_ops.config import config_reference, config_schema, load_config
from crawler_ops.errors import ConfigError, StatusTableError
from crawler_ops.migration.old_status import BIGINT_MAX, ImportFileError, read_old_status
from crawler_ops.terminal import json_terminal_safe, terminal_safe

T = TypeVar("T")
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"


def say(text: str, error: bool = False) -> None:
    """Print ``text`` (to stderr with ``error``) with control characters and escape sequences shown escaped: it
    may hold stored error text, file contents or names from the config."""
    print(terminal_safe(text, keep_newlines=True), file=sys.stderr if error else sys.stdout)


def bigint(text: str) -> int:
    """An offset or row id from the command line: a whole number PostgreSQL's bigint holds, not negative."""
    number = int(text)
    if not 0 <= number <= BIGINT_MAX:
        raise argparse.ArgumentTypeError(f"{text} is out of range (0 to {BIGINT_MAX})")
    return number


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crawler-ops", description="crawler_ops operations")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser(
        "status", help="per crawl task: source total, watermark, runs, errors, Kafka lag; per executor: rows, parked"
    )
    status.add_argument("--task", help="only this crawl task id")
    status.add_argument("--executor", help="only this executor (its name)")
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.add_argument("--no-live", action="store_true", help="do not ask the sources and Kafka (PostgreSQL only)")
    validate = commands.add_parser(
        "validate", help="check the config as DAG parsing does: every task and executor, with the same messages"
    )
    validate.add_argument("config", nargs="?", type=Path, help="a YAML file or folder (default: $CRAWLER_OPS_CONFIG)")
    commands.add_parser("schema", help="print the config's JSON schema (for editors)")
    commands.add_parser("config-reference", help="print the configuration reference (Markdown, docs/configuration.md)")
    skip = commands.add_parser("skip-batch", help="let the watermark pass a parked batch (its records are lost)")
    skip.add_argument("--task", required=True, help="the crawl task id")
    skip.add_argument("--offset", type=bigint, required=True, help="the parked batch's start offset")
    unpark = commands.add_parser("unpark", help="parked executor rows back to pending with a fresh attempt count")
    unpark.add_argument("--executor", required=True, help="the executor's name")
    unpark.add_argument(
        "--id", type=bigint, nargs="+", dest="ids", help="only these row ids (default: every parked row)"
    )
    shards = commands.add_parser("dag-shards", help="spread the crawl DAGs over N DAG files (by task id hash)")
    shards.add_argument("count", type=int, help="the number of crawl DAG files")
    shards.add_argument("--dags-folder", type=Path, default=DAGS_FOLDER, help=f"default {DAGS_FOLDER}")
    imports = commands.add_parser(
        "import-progress", help="take over the old crawler service's positions (its status output, JSON or CSV)"
    )
    imports.add_argument("file", type=Path, help="the old status endpoint's JSON, or a CSV with its columns")
    imports.add_argument("--apply", action="store_true", help="write the plan (default: print it, write nothing)")
    imports.add_argument("--force", action="store_true", help="allow moving a watermark backwards")
    pools = commands.add_parser(
        "pools", help="the source connections' Airflow pools (max_in_flight slots), as airflow pools import reads them"
    )
    pools.add_argument("config", nargs="?", type=Path, help="a YAML file or folder (default: $CRAWLER_OPS_CONFIG)")
    pools.add_argument(
        "--apply", action="store_true", help="create or resize them in Airflow's metadata DB (default: print them)"
    )
    check = commands.add_parser(
        "check",
        help="ask a task's source once: total, records, keys, dates, order, a sample message, a first crawl's cost",
    )
    check.add_argument("--task", required=True, help="the crawl task id")
    check.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    check.add_argument("--config", type=Path, help="a YAML file or folder (default: $CRAWLER_OPS_CONFIG)")
    args = parser.parse_args(argv)
    if args.command == "schema":
        print(json.dumps(config_schema(), ensure_ascii=False, indent=2))
        return 0
    if args.command == "config-reference":
        sys.stdout.write(config_reference())
        return 0
    try:
        down = services_down(args)
        if down and args.command != "status":  # status still prints what it can read, then fails
            return report_down(down)
        if args.command == "skip-batch":
            return skip_batch(args.task, args.offset)
        if args.command == "validate":
            return run_validate(args.config)
        if args.command == "unpark":
            return run_unpark(args.executor, args.ids)
        if args.command == "dag-shards":
            return run_dag_shards(args.count, args.dags_folder)
        if args.command == "import-progress":
            return run_import(args.file, args.apply, args.force)
        if args.command == "pools":
            return run_pools(args.config, args.apply)
        if args.command == "check":
            return run_check(args.task, args.config, args.json)
        code = run_status(args)
        return report_down(down) if down and code == 0 else code
    except (ConfigError, ImportFileError, StatusTableError) as exc:
        say(f"error: {exc}", error=True)
        return 2


def report_down(down: Sequence[str]) -> int:
    for problem in down:
        say(f"error: {problem}", error=True)
    return 2


def services_down(args: argparse.Namespace) -> list[str]:
    """The services the command needs that do not answer, each named with what to do about it: PostgreSQL
    (the crawler database of the tasks and executors it reads or writes), Kafka (a live status) and Airflow's
    metadata database (``pools --apply``)."""
    if args.command == "pools":
        return [] if not args.apply else metadata_db_down()
    if args.command not in ("status", "skip-batch", "unpark", "import-progress", "check"):
        return []
    loaded = load_config(args.config if args.command == "check" else None)
    tasks, executors = list(loaded.tasks), list(loaded.executors)
    if args.command == "import-progress":
        # Only the databases of the rows it would import; a file it cannot read is reported first.
        named = {row.task_id for row in read_old_status(args.file)[0]}
        tasks, executors = [t for t in tasks if t.id in named], []
    if args.command in ("skip-batch", "check") or (args.command == "status" and args.task):
        tasks, executors = [t for t in tasks if t.id == args.task], []
    if args.command == "unpark" or (args.command == "status" and args.executor):
        tasks, executors = [], [e for e in executors if e.name == args.executor]
    users = [(t.postgres_conn_id, t.id) for t in tasks] + [(e.postgres_conn_id, e.name) for e in executors]
    if args.command == "status":  # a connection the environment does not define is shown on the report's rows
        users = [(conn_id, user) for conn_id, user in users if defined(conn_id)]
    down = with_connections(lambda: postgres_down(users))
    if args.command == "status" and not args.no_live:
        down += with_connections(lambda: kafka_down([t.kafka.conn_id for t in tasks if defined(t.kafka.conn_id)]))
    return down


def defined(conn_id: str) -> bool:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def postgres_down(users: Sequence[tuple[str, str]]) -> list[str]:
    """Connect once to each crawler database of ``users`` (connection id, the task or executor using it)."""
    from crawler_ops.hooks.store.db import CrawlerDbHook

    down = []
    for conn_id, user in sorted(dict(reversed(users)).items()):
        hook = CrawlerDbHook(conn_id, user)
        try:
            hook.db.execute("SELECT 1")
        except StatusTableError as exc:
            down.append(
                f"{' '.join(str(exc).split())}; PostgreSQL is unreachable: start it or point the connection at it "
                f"(AIRFLOW_CONN_{conn_id.upper()} or 'airflow connections add'), then run this again"
            )
        finally:
            hook.close()
    return down


KAFKA_PROBE_TIMEOUT_S = 10.0


def kafka_down(conn_ids: Sequence[str]) -> list[str]:
    from confluent_kafka import KafkaException

    from crawler_ops.hooks.kafka.producer import IdempotentProducerHook

    down = []
    for conn_id in sorted(set(conn_ids)):
        config = IdempotentProducerHook(conn_id).client_config()
        try:
            IdempotentProducerHook(conn_id).admin().list_topics(timeout=KAFKA_PROBE_TIMEOUT_S)
        except KafkaException as exc:
            down.append(
                f"Kafka (connection '{conn_id}', bootstrap.servers {config.get('bootstrap.servers')}) is unreachable ("
                f"{exc.args[0].str() if exc.args and hasattr(exc.args[0], 'str') else exc}); start Kafka or point "
                f"the connection at it (AIRFLOW_CONN_{conn_id.upper()}), or run status with --no-live"
            )
    return down


def metadata_db_down() -> list[str]:
    from airflow.utils.session import create_session
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with create_session() as session:
            session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        cause = " ".join(str(getattr(exc, "orig", None) or exc).split())
        return [
            f"Airflow's metadata database is unreachable ({cause}); start it or point "
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN at it, then run this again"
        ]
    return []


def run_validate(path: Path | None) -> int:
    """Exit status 0 when every task, executor and the maintenance block is valid, 1 when one is not (each
    reported with the message its DAG would show), 2 when the file itself cannot be read."""
    loaded = load_config(path, check_imports=True)
    problems = [*loaded.errors.values(), *loaded.executor_errors.values()]
    problems += [loaded.maintenance_error] if loaded.maintenance_error else []
    for task in loaded.tasks:
        say(f"ok: task {task.id} (DAG {task.dag_id})")
    for executor in loaded.executors:
        say(f"ok: executor {executor.name} (DAG {executor.dag_id})")
    for problem in problems:
        say(f"error: {problem}", error=True)
    print(f"{len(loaded.tasks)} tasks and {len(loaded.executors)} executors valid, {len(problems)} invalid")
    return 1 if problems else 0


def run_pools(path: Path | None, apply: bool) -> int:
    from crawler_ops.ops.pools import apply_pools, pools_document, source_pools

    pools = source_pools(load_config(path).tasks).values()
    if not apply:
        print(json.dumps(pools_document(pools), ensure_ascii=False, indent=2))
        return 0
    changed = apply_pools(pools)
    for change in changed:
        print(f"pool {change}")
    print(f"{len(pools)} source pools, {len(changed)} created or resized")
    return 0


def run_dag_shards(count: int, folder: Path) -> int:
    from crawler_ops.factory.shards import write_shard_files

    if count < 1 or not folder.is_dir():
        print(f"error: need a count >= 1 and an existing DAG folder (got {count}, {folder})", file=sys.stderr)
        return 2
    written = write_shard_files(folder, count)
    print(f"{len(written)} crawl DAG files in {folder}: {', '.join(p.name for p in written)}")
    return 0


def run_import(path: Path, apply: bool, force: bool) -> int:
    """Exit status 0 when every row was importable (and, with ``apply``, written), 1 otherwise."""
    from crawler_ops.migration.import_progress import import_progress  # imports Airflow's hooks

    report = with_connections(lambda: import_progress(path, load_config(), apply=apply, force=force))
    report.render(path, apply, say)
    return 0 if report.ok else 1


def run_status(args: argparse.Namespace) -> int:
    from crawler_ops.ops.status import collect  # imports Airflow: after argument errors are reported

    if args.task and args.executor:
        print("error: name a crawl task (--task) or an executor (--executor), not both", file=sys.stderr)
        return 2
    try:
        report = collect(load_config(), args.task, live=not args.no_live, executor=args.executor)
    except KeyError:
        what = f"crawl task '{args.task}'" if args.task else f"executor '{args.executor}'"
        say(f"error: no {what} in the config; see the 'tasks' and 'executors' lists", error=True)
        return 2
    if args.json:
        print(json_terminal_safe(json.dumps(report, ensure_ascii=False, indent=2, default=str)))
    else:
        print(render_text(report))
    return 0


def run_check(task_id: str, path: Path | None, as_json: bool) -> int:
    """Exit status 0 when the source suits the task, 1 when its data has a problem, 2 when the source or the config
    cannot be read (the report says which)."""
    from crawler_ops.config import get_task
    from crawler_ops.hooks.source.auth import redact
    from crawler_ops.ops.check import CheckFailed, check_task, failed_report
    from crawler_ops.ops.check_text import render_text as render_check

    cfg = get_task(task_id, path)
    try:
        report = with_connections(lambda: check_task(cfg))
    except CheckFailed as exc:
        report = failed_report(cfg, str(exc))
    if as_json:  # escapes inside the JSON strings: the output stays JSON
        print(json_terminal_safe(redact(json.dumps(report, ensure_ascii=False, indent=2))))
    else:
        say(redact(render_check(report)), error=report["exit_code"] == 2)
    return int(report["exit_code"])


def skip_batch(task_id: str, offset: int) -> int:
    """Mark the parked batch of ``task_id`` starting at ``offset`` done without its records, recorded as an error;
    the next run's commit moves the watermark past it."""
    from crawler_ops.config import get_task
    from crawler_ops.hooks.store.hook import CrawlStoreHook

    cfg = get_task(task_id)
    store = CrawlStoreHook(cfg.postgres_conn_id, cfg.id)

    def skip() -> list[Any]:
        with store.transaction(lock=True) as cur:
            skipped = store.batches.skip_parked(cur, lo=offset)
            for parked in skipped:
                message = f"task {cfg.id}: parked batch {parked.describe()} skipped by the operator (skip-batch)"
                store.record_error(cur, "cli:skip-batch", message, "batch", parked.batch)
        return skipped

    try:
        skipped = with_connections(skip)
    finally:
        store.close()
    if not skipped:
        say(f"error: task {cfg.id} has no parked batch starting at offset {offset}; see its status", error=True)
        return 1
    print(f"skipped {skipped[0].describe()}; the next run's commit moves the watermark past it")
    return 0


def with_connections(work: Callable[[], T]) -> T:
    """``work()``, with an Airflow connection it names but the environment does not define reported as a
    :class:`ConfigError` (exit status 2) instead of a traceback."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return work()
    except AirflowNotFoundException as exc:
        raise ConfigError(f"{exc}; define it (AIRFLOW_CONN_<ID> or 'airflow connections add')") from exc


def run_unpark(name: str, ids: list[int] | None) -> int:
    """Un-park an executor's rows; exit status 1 when an asked-for id was not parked."""
    from crawler_ops.executor import unpark  # imports Airflow: after argument errors are reported

    loaded = load_config()
    executor = next((e for e in loaded.executors if e.name == name), None)
    if executor is None:
        problem = loaded.executor_errors.get(name, f"no executor '{name}' in the config; see the 'executors' list")
        raise ConfigError(problem)
    result = unpark(executor, ids)
    say(f"executor {name}: {len(result.unparked)} rows back to pending: {show_ids(result.unparked)}")
    for row_id, status in sorted(result.not_parked.items()):
        say(f"executor {name}: row {row_id} is not parked ({status}); left as it is", error=True)
    return 1 if result.not_parked else 0


def show_ids(ids: Sequence[int], most: int = 20) -> str:
    shown = ", ".join(map(str, ids[:most]))
    return (shown + f", ... ({len(ids) - most} more)" if len(ids) > most else shown) or "none"


def render_text(report: Mapping[str, Any]) -> str:
    """A block of lines per task: total, watermark, progress, status, counts, running or not, lag."""
    lines = [f"crawler_ops status at {report['generated_at']}"]
    for row in report["tasks"]:
        lines += ["", f"{row['task_id']} ({row['task_name']})  dag {row['dag_id']}  topic {row['topic']}"]
        running = {True: "yes", False: "no", None: "unknown"}[row.get("running")]
        source = row.get("source_total", "-") if "source_error" not in row else f"? ({row['source_error']})"
        lines.append(
            f"  source total {show(source)}  stored total {show(row.get('total'))}  watermark "
            f"{show(row.get('watermark'))} ({row['progress']})  last start offset {show(row.get('last_start_offset'))}"
        )
        lines.append(
            f"  status {row.get('status')}  last update {show(row.get('last_update'))}  running {running}  "
            f"filtered {row.get('filtered_count', 0)}  produced {row.get('produced_count', 0)}"
        )
        for key in ("db_error", "running_error"):
            if row.get(key):
                lines.append(f"  {key.replace('_', ' ')}: {row[key]}")
        if row.get("batches"):
            lines.append("  batches " + "  ".join(f"{k} {v}" for k, v in sorted(row["batches"].items())))
        for parked in row.get("parked") or ():
            lines.append(f"  PARKED batch {parked}")
        run = row.get("last_run")
        if run:
            lines.append(
                f"  last run {run['run_id']} {run['mode']} {run['status']} {run['duration_s']}s: planned "
                f"{run['planned']} fetched {run['fetched']} kept {run['kept']} published {run['published']} "
                f"expired {run['expired']} dead-lettered {run['dead_lettered']} errors {run['errors']}"
            )
            if run.get("last_error"):
                lines.append(f"  last run's error: {run['last_error']}")
        drift = row.get("drift")
        if drift:
            lines.append(f"  field {drift['summary']} (run {drift['run_id']})")
        errors = row.get("errors_24h") or {}
        if errors.get("records") or errors.get("batches"):
            counts = f"{errors['records']} records, {errors['batches']} batch/plan"
            lines.append(f"  errors (24h): {counts}; latest: {errors['latest']}")
        if "kafka" in row:
            lines.append("  kafka " + render_kafka(row["kafka"]))
    for bad in report.get("invalid_tasks", []):
        lines += ["", f"{bad['task_id']}: INVALID CONFIG: {bad['error']}"]
    for executor in report.get("executors", []):
        lines += ["", *render_executor(executor)]
    for bad in report.get("invalid_executors", []):
        lines += ["", f"executor {bad['name']}: INVALID CONFIG: {bad['error']}"]
    return "\n".join(terminal_safe(line) for line in lines)


def render_executor(row: Mapping[str, Any]) -> list[str]:
    """An executor's rows per status and its latest parked rows with their errors."""
    lines = [f"executor {row['name']}  dag {row['dag_id']}  status table {row['status_table']}"]
    if row.get("db_error"):
        return [*lines, f"  db error: {row['db_error']}"]
    lines.append("  rows " + "  ".join(f"{k} {v}" for k, v in row["rows"].items()))
    for parked in row.get("parked", []):
        lines.append(
            f"  parked row {parked['id']} after {parked['attempts']} attempts at {show(parked['failed_at'])}: "
            f"{parked['last_error']}"
        )
    if row.get("parked"):
        lines.append(f"  un-park: crawler-ops unpark --executor {row['name']} [--id ID ...]")
    return lines


def show(value: Any) -> str:
    return "-" if value is None else str(value)


def render_kafka(kafka: Mapping[str, Any]) -> str:
    if "messages" not in kafka:
        return f"? ({kafka.get('error')})"
    groups = kafka.get("groups") or {}
    lags = [f"{g} lag {v['lag']}" if "lag" in v else f"{g} ? ({v['error']})" for g, v in sorted(groups.items())]
    return f"{kafka['messages']} messages" + (f"; {', '.join(lags)}" if lags else "; no consumer groups configured")


if __name__ == "__main__":
    sys.exit(main())
