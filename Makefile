# crawler_ops developer commands. Needs Python 3.11, Java 17 and Maven; everything else is installed here.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-unit stack-up stack-down stack-status airflow-up airflow-down status lint fmt docs bench clean \
	constraints compose-test mutation

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	@command -v $(PY) >/dev/null || { echo "Python 3.11 is required ($(PY) not found): apt-get install python3.11 python3.11-venv"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt -c constraints.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# After changing a pin in requirements*.txt: resolve again without the old constraints, then write constraints.txt
# from what got installed (the Airflow image installs under the same file).
constraints:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/python dev/constraints.py
	touch $(STAMP)

stack-up: $(STAMP)
	$(BIN)/python dev/stack.py up

stack-down:
	$(BIN)/python dev/stack.py down

stack-status:
	$(BIN)/python dev/stack.py status

status: stack-up
	. .stack/env.sh && $(BIN)/crawler-ops status $(STATUS_ARGS)

# EXECUTOR=celery WORKERS=2: CeleryExecutor with a Redis broker and that many workers (LocalExecutor by default).
EXECUTOR ?= local
WORKERS ?= 2
airflow-up: stack-up
	$(BIN)/python dev/stack.py airflow-up --executor $(EXECUTOR) --workers $(WORKERS)

airflow-down:
	$(BIN)/python dev/stack.py airflow-down

demo: stack-up
	$(BIN)/python dev/demo.py

# The whole suite in one session, in random order (pytest-randomly; the seed is printed at the top: rerun an order
# with PYTEST_ARGS="--randomly-seed=<seed>", or PYTEST_ARGS="-p no:randomly" for file order), on TEST_WORKERS
# pytest-xdist workers: the tests on Airflow's services as one unit on one of them (tests/xdist_airflow.py), every
# other test wherever there is room. TEST_WORKERS=0 runs it in this process, the tests on Airflow's services last.
TEST_WORKERS ?= 2
test: stack-up
	$(BIN)/python -m pytest tests -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The configuration reference, generated from the config model (tests/unit/config/test_reference.py checks it).
docs: $(STAMP)
	mkdir -p docs
	$(BIN)/python -m crawler_ops config-reference > docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md

# Every figure of docs/performance.md, then the fleet's short run (20-28 minutes on 2 cores); BENCH_ARGS to change.
BENCH_ARGS ?= --total 200000 --latencies 0,20,50,200 --totals 10000,100000,1000000 --skip-old-sleep \
	--scheduler --scheduler-latency 50 --profile
bench: stack-up
	$(BIN)/python bench/crawl_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/chunk_parts.py --latency 0
	$(BIN)/python bench/chunk_parts.py --latency 50
	$(BIN)/python bench/window_bench.py
	$(BIN)/python bench/window_bench.py --batch-size 100 --concurrency 8
	$(BIN)/python bench/dag_shards_bench.py --tasks 1000
	$(BIN)/python bench/fleet_bench.py --short
	$(BIN)/python bench/value_formats.py

# docker-compose.yaml under a real Docker engine (dev/compose/engine.sh starts it and builds stand-in images; root).
# COMPOSE_TEST_ARGS=--keep leaves a failed project running for a look; docs/deploy.md has the phases and timings.
compose-test: $(STAMP)
	$(BIN)/python dev/compose/compose_test.py $(COMPOSE_TEST_ARGS)

clean:
	if [ -x $(BIN)/python ]; then $(BIN)/python dev/stack.py clean; else rm -rf .stack; fi

# Mutation testing of the modules that guard against loss, duplicates and leaks (tests/MUTATION.md explains
# survivors); MUTATION_ARGS to narrow it, e.g. MUTATION_ARGS="'crawler_ops.planning*'".
MUTATION_ARGS ?=
mutation: stack-up
	. .stack/env.sh && $(BIN)/python dev/mutation.py $(MUTATION_ARGS)
