"""Reading a config: YAML (or JSON) files, ``defaults`` merged into each entry, each entry validated on its own.

One invalid task does not hide the others: :func:`load_config` returns the valid tasks and, separately,
an error message per invalid task naming the task and the field. This is the package's I/O: files, the
``CRAWLER_OPS_CONFIG`` variable, and (``check_imports``) the Python path, looked at after the models validated.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from crawler_ops.config import document_cache, paginators, source_auth
from crawler_ops.config.checks import missing_modules
from crawler_ops.config.models import CrawlTaskConfig, DagSettings, ExecutorTaskConfig, LoadedConfig, MaintenanceConfig
from crawler_ops.errors import ConfigError

CONFIG_ENV = "CRAWLER_OPS_CONFIG"
DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "include" / "crawler_tasks.yaml"
# libyaml's safe loader reads the same documents to the same values as PyYAML's own, about ten times faster: every DAG
# file reads the whole config each time the DAG processor parses it.
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The suffixes of config files: YAML, or JSON (read about fifty times faster: for configs a program writes).
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
#: The most values a config document may hold once its YAML aliases are expanded (a config of 10,000 tasks holds
#: about half a million): aliases of aliases share their values when loaded, but everything that reads the document
#: afterwards (validation, the JSON cache) walks every copy, so a few hundred bytes could cost hours.
MAX_CONFIG_VALUES = 5_000_000

M = TypeVar("M", bound=BaseModel)
D = TypeVar("D", bound=DagSettings)
# A problem of one entry: where (pydantic's loc) and what.
Problem = tuple[tuple[int | str, ...], str]
# The kinds chosen by ``type`` under each key: pydantic puts the chosen kind in an error's place, the YAML does not.
TAGS = {"paginator": set(paginators.KINDS), "auth": set(source_auth.KINDS)}

# The keys of a config file, in the order messages list them.
TOP_LEVEL = {
    "defaults": "merged into every entry of tasks (deep: a nested block such as source merges key by key; the "
    "entry's own keys win); executors and maintenance take part of it, see below",
    "tasks": "the crawl tasks, each becoming the DAG crawl_<id>",
    "executors": "the executors, each becoming the DAG exec_<name>",
    "maintenance": "the retention DAG crawler_ops_maintenance (and the gauges DAG); its defaults when absent",
}
# ``defaults.executor``: keys for every executor only (crawl tasks do not see it).
EXECUTOR_DEFAULTS = "executor"
# What the retention DAG takes from ``defaults`` (schedule and retries are the crawl tasks' own).
SHARED_DEFAULTS = (
    "postgres_conn_id",
    "schedule_timezone",
    "start_date",
    "retry_delay_s",
    "execution_timeout_min",
    "paused",
    "tags",
)


def broken_dag_id(label: str, prefix: str = "crawl_") -> str:
    """The DAG id of the placeholder DAG that shows the invalid config entry ``label``."""
    return prefix + (re.sub(r"[^A-Za-z0-9_.-]", "_", label.lstrip("#")) or "invalid")


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def describe(exc: ValidationError) -> str:
    return describe_problems([problem_of(err) for err in exc.errors()])


def describe_problems(problems: Sequence[Problem]) -> str:
    return "; ".join(f"field '{field_name(loc) or '(task)'}': {msg}" for loc, msg in problems)


def located(err: Any) -> tuple[Any, ...]:
    """Where a validation error sits, as the YAML says it: a kind chosen by its ``type`` (a paginator's, an auth's)
    is no step of the path, and an unknown kind is the ``type`` key's problem."""
    loc = tuple(err["loc"])
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return (*loc, "type")
    return tuple(part for i, part in enumerate(loc) if not (i and part in TAGS.get(loc[i - 1], ())))


def problem_of(err: Any) -> Problem:
    """A validation error as a problem of the entry; an unknown kind lists the kinds there are."""
    message = err["msg"]
    if err["type"] == "union_tag_invalid":
        message = f"Input should be {err['ctx']['expected_tags']} (got {err['ctx']['tag']!r})"
    return located(err), message


def field_name(loc: Sequence[Any]) -> str:
    """A field's place as YAML readers write it: ``source.responses[1].action``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def validate_entry(model: type[D], data: Mapping[str, Any], check_imports: bool) -> tuple[D | None, list[Problem]]:
    """The entry, or None and its problems. With ``check_imports``, each of the model's ``import_paths`` that is
    otherwise valid must name a module on the Python path; such a problem reads, and sits among the others, as the
    field's own validation error would."""
    try:
        entry: D | None = model.model_validate(data)
        problems: list[Problem] = []
    except ValidationError as exc:
        entry, problems = None, [problem_of(err) for err in exc.errors()]
    if not check_imports:
        return entry, problems
    failed = {loc[0] for loc, _ in problems if loc}
    paths = {name: data.get(name) for name in model.import_paths if name not in failed}
    missing: list[Problem] = [((name,), f"Value error, {why}") for name, why in missing_modules(paths)]
    if not missing:
        return entry, problems
    order = list(model.model_fields)

    def position(problem: Problem) -> int:
        loc = problem[0]
        return order.index(str(loc[0])) if loc and loc[0] in order else len(order)

    return None, sorted(problems + missing, key=position)


def validate_entries(
    entries: Any,
    model: type[D],
    key: str,
    defaults: Mapping[str, Any],
    kind: str,
    origin: str,
    check_imports: bool = False,
    keep: Callable[[str], bool] | None = None,
) -> tuple[list[D], dict[str, str]]:
    """Validate each entry of a config list on its own; errors are keyed by the entry's ``key`` value. With
    ``check_imports``, the modules of transforms and functions must be found on the Python path. With ``keep``,
    only the entries (and errors) whose label it keeps: the others are neither validated nor reported."""
    if not isinstance(entries, list):
        raise ConfigError(f"{origin}: '{kind}s' must be a list")
    valid: list[D] = []
    errors: dict[str, str] = {}
    seen: set[str] = set()
    for index, raw in enumerate(entries):
        label = str(raw.get(key)) if isinstance(raw, Mapping) and raw.get(key) else f"#{index}"
        if label in seen:
            if keep is None or keep(f"{label}@{index}"):
                errors[f"{label}@{index}"] = f"{origin}: {kind} '{label}': duplicate {key} ({kind} #{index})"
            continue
        seen.add(label)
        if keep is not None and not keep(label):
            continue
        if not isinstance(raw, Mapping):
            errors[label] = f"{origin}: {kind} '{label}': must be a mapping"
            continue
        entry, problems = validate_entry(model, deep_merge(defaults, raw), check_imports)
        if entry is None:
            errors[label] = f"{origin}: {kind} '{label}': {describe_problems(problems)}"
        else:
            valid.append(entry)
    return valid, errors


def parse_config(
    document: Any, origin: str = "<config>", check_imports: bool = False, keep_task: Callable[[str], bool] | None = None
) -> LoadedConfig:
    """Validate a parsed YAML document; per-entry problems go to ``errors`` / ``executor_errors``. With
    ``check_imports`` (at DAG parse time), a transform or function whose module cannot be found is one. With
    ``keep_task`` (a crawl DAG file building its shard), only the crawl tasks it keeps (by id or label) are
    validated, and no executor."""
    expected = tuple(TOP_LEVEL)
    if not isinstance(document, Mapping):
        raise ConfigError(f"{origin}: the top level must be a mapping with {', '.join(map(repr, expected))}")
    unknown = set(document) - set(expected)
    if unknown:
        raise ConfigError(f"{origin}: unknown top-level keys {sorted(unknown)}; expected {', '.join(expected)}")
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise ConfigError(f"{origin}: 'defaults' must be a mapping")
    crawl_defaults = {key: value for key, value in defaults.items() if key != EXECUTOR_DEFAULTS}
    tasks, errors = validate_entries(
        document.get("tasks") or [], CrawlTaskConfig, "id", crawl_defaults, "task", origin, check_imports, keep_task
    )
    executors, executor_errors = validate_entries(
        [] if keep_task is not None else document.get("executors") or [],
        ExecutorTaskConfig,
        "name",
        executor_defaults(defaults, origin),
        "executor",
        origin,
        check_imports,
    )
    maintenance, maintenance_error = parse_maintenance(document.get("maintenance"), defaults, origin)
    return LoadedConfig(
        tasks=tuple(tasks),
        errors=errors,
        executors=tuple(executors),
        executor_errors=executor_errors,
        maintenance=maintenance,
        maintenance_error=maintenance_error,
    )


def executor_defaults(defaults: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """What executors take from ``defaults``: the settings every generated DAG has (schedule, retries,
    connection, ...), then the ``defaults.executor`` block over them."""
    own = defaults.get(EXECUTOR_DEFAULTS) or {}
    if not isinstance(own, Mapping):
        raise ConfigError(f"{origin}: 'defaults.{EXECUTOR_DEFAULTS}' must be a mapping")
    shared = {key: value for key, value in defaults.items() if key in DagSettings.model_fields}
    return deep_merge(shared, own)


def parse_maintenance(
    raw: Any, defaults: Mapping[str, Any], origin: str
) -> tuple[MaintenanceConfig | None, str | None]:
    """The ``maintenance`` block over the shared ``defaults``; an invalid block is reported, not raised."""
    if raw is not None and not isinstance(raw, Mapping):
        return None, f"{origin}: 'maintenance' must be a mapping"
    shared = {key: defaults[key] for key in SHARED_DEFAULTS if key in defaults}
    try:
        return MaintenanceConfig.model_validate({**shared, **(raw or {})}), None
    except ValidationError as exc:
        return None, f"{origin}: maintenance: {describe(exc)}"


def load_config(
    path: Path | None = None, check_imports: bool = False, keep_task: Callable[[str], bool] | None = None
) -> LoadedConfig:
    """Read and validate the config at ``path`` (default: ``$CRAWLER_OPS_CONFIG`` or the repo sample): one YAML
    (or ``.json``) file, or a folder whose ``*.yaml`` / ``*.yml`` / ``*.json`` files are read in name order, each with
    its own ``defaults``.
    With ``check_imports`` (DAG parsing only), also that each transform's and function's module exists, which
    imports their parent packages; without it (the status view in the api-server, the CLI) only names are read and
    nothing the config names is imported. ``keep_task``: see :func:`parse_config`."""
    path = path or config_path()
    if not path.is_dir():
        return parse_config(read_document(path), str(path), check_imports, keep_task)
    files = sorted(p for p in path.iterdir() if p.suffix in CONFIG_SUFFIXES and p.is_file())
    if not files:
        raise ConfigError(
            f"the config folder {path} holds no .yaml or .json file; set {CONFIG_ENV} to a file or a folder"
        )
    documents = [(str(f), read_document(f)) for f in files]
    parts = [(origin, parse_config(doc, origin, check_imports, keep_task), doc) for origin, doc in documents]
    return merge_configs(parts)


_current_lock = threading.Lock()
_current: tuple[Any, LoadedConfig | ConfigError] | None = None


def config_signature(path: Path) -> Any:
    """What tells the config's files apart without reading them: each one's name, size, inode and times; None when a
    file cannot be looked at (the config is then read again)."""
    try:
        files = [path] if not path.is_dir() else sorted(p for p in path.iterdir() if p.suffix in CONFIG_SUFFIXES)
        stats = [(str(f), f.stat()) for f in files]
    except OSError:
        return None
    return str(path), tuple((name, s.st_size, s.st_ino, s.st_mtime_ns, s.st_ctime_ns) for name, s in stats)


def current_config() -> LoadedConfig:
    """The config as :func:`load_config` reads it (``check_imports`` off), for a long-lived process (the api-server):
    read again only when one of its files changed, so each request does not pay for a whole config, whatever it
    holds. A config that fails is kept as its error until it changes."""
    global _current
    path = config_path()
    signature = config_signature(path)
    with _current_lock:
        if signature is None or _current is None or _current[0] != signature:
            try:
                found: LoadedConfig | ConfigError = load_config(path, check_imports=False)
            except ConfigError as exc:
                found = exc
            _current = (signature, found)
        result = _current[1]
    if isinstance(result, ConfigError):
        raise ConfigError(str(result))  # a new one: raising the kept one again would grow its traceback each time
    return result


def read_document(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read crawler config {path}: {exc}; set {CONFIG_ENV}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); save it as UTF-8") from exc
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    known = document_cache.cached(text)
    if known is not None:
        return known
    try:
        document = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError:
        pass
    else:
        check_expansion(document, path)
        document_cache.keep(text, document)
        return document
    try:  # PyYAML's own loader says the same, and quotes the offending lines
        document = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    check_expansion(document, path)
    return document


def expanded_size(document: Any) -> int:
    """How many values ``document`` holds with every shared value (a YAML alias) counted each time it is used; in
    time linear in its distinct values (each container is sized once)."""
    sizes: dict[int, int] = {}
    # Containers in post-order, iteratively: an alias chain may nest deeper than Python's recursion limit.
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        node, ready = stack.pop()
        if not isinstance(node, dict | list) or id(node) in sizes:
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if not ready:
            stack.append((node, True))
            stack.extend((child, False) for child in children if isinstance(child, dict | list))
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(c), 1) if isinstance(c, dict | list) else 1 for c in children)
    return sizes.get(id(document), 1)


def check_expansion(document: Any, path: Path) -> None:
    """A YAML document whose aliases expand past :data:`MAX_CONFIG_VALUES` values is refused (a "billion laughs")."""
    size = expanded_size(document)
    if size > MAX_CONFIG_VALUES:
        raise ConfigError(
            f"{path}: its YAML aliases (*name) expand to {size:,} values, more than {MAX_CONFIG_VALUES:,}; write "
            "the shared parts out, or use fewer aliases of aliases"
        )


def merge_configs(parts: Sequence[tuple[str, LoadedConfig, Any]]) -> LoadedConfig:
    """One config from the files of a folder. A task id (or executor name) defined in two files is an error on
    that entry, which then builds no DAG; at most one file may hold the ``maintenance`` block."""
    tasks, errors = merge_entries([(origin, part.tasks, part.errors) for origin, part, _ in parts], "id", "task")
    executors: list[ExecutorTaskConfig]
    executors, executor_errors = merge_entries(
        [(origin, part.executors, part.executor_errors) for origin, part, _ in parts], "name", "executor"
    )
    with_block = [(origin, part) for origin, part, doc in parts if isinstance(doc, Mapping) and "maintenance" in doc]
    maintenance: MaintenanceConfig | None = with_block[0][1].maintenance if with_block else MaintenanceConfig()
    maintenance_error = with_block[0][1].maintenance_error if with_block else None
    if len(with_block) > 1:
        maintenance = None
        maintenance_error = f"maintenance: defined in {' and '.join(o for o, _ in with_block)}; keep one"
    merged: dict[str, Any] = {"tasks": tuple(tasks), "errors": errors, "executors": tuple(executors)}
    merged |= {"executor_errors": executor_errors, "maintenance": maintenance, "maintenance_error": maintenance_error}
    return parts[0][1].model_copy(update=merged)


def merge_entries(
    parts: Sequence[tuple[str, Sequence[M], Mapping[str, str]]], key: str, kind: str
) -> tuple[list[M], dict[str, str]]:
    """Entries and errors of several files by ``key``; a key seen in more than one file becomes an error."""
    seen: dict[str, list[str]] = {}
    for origin, entries, problems in parts:
        for label in [getattr(entry, key) for entry in entries] + list(problems):
            seen.setdefault(label, []).append(origin)
    twice = {label: origins for label, origins in seen.items() if len(origins) > 1}
    entries = [e for _, found, _ in parts for e in found if getattr(e, key) not in twice]
    errors = {label: message for _, _, problems in parts for label, message in problems.items() if label not in twice}
    for label, origins in twice.items():
        errors[label] = f"{kind} '{label}' is defined in {' and '.join(origins)}; keep it in one file"
    return entries, errors


def get_task(task_id: str, path: Path | None = None) -> CrawlTaskConfig:
    loaded = load_config(path)
    for task in loaded.tasks:
        if task.id == task_id:
            return task
    if task_id in loaded.errors:
        raise ConfigError(loaded.errors[task_id])
    raise ConfigError(f"no crawl task '{task_id}' in {path or config_path()}")
