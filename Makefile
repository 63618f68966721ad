# Stratus: `make demo` runs a real experiment on the embedded local stack; `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stratus-installed

# pytest-xdist workers: every core (2 in CI). Tiers in tests/conftest.py; `make test` runs each test once:
# everything but e2e test by test (an idle worker takes over another's queue: the tests' lengths differ a
# lot), then e2e: a module with a stack of its own (a module-scoped fixture) whole on one worker, so that
# stack starts once, every other test on whichever worker is free (each worker has its own session stack,
# with its own free ports and state folder), the longest modules first; tests/e2e/conftest.py groups and
# orders them.
# PYTEST_WORKERS=0: no workers, pytest runs the tests itself.
PYTEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -q -n $(PYTEST_WORKERS)
# The e2e tests wait on their stacks and trials much of the time (two workers kept 1.4 of 2 cores busy):
# one worker more than cores (3 on 2 cores ran the tier in 8.3 min, 1.7 cores busy).
E2E_WORKERS ?= $(if $(filter 0,$(PYTEST_WORKERS)),0,$(shell $(PYTHON) -c "import os; print((os.cpu_count() or 1) + 1)"))
PYTEST_E2E := $(PY) -m pytest -q -n $(E2E_WORKERS)

.PHONY: install demo test lint typecheck unit integration aws e2e bench clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip<26.3"  # chalice 1.34 requires pip<26.3
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# The locks of the Lambda package's and the compute wheel's dependencies (infra/aws/lambda.lock,
# infra/aws/compute.lock): exact versions with their hashes, resolved anew by uv from requirements.txt and
# pyproject.toml for the platforms they run on (infra/aws/lock.py). Run after changing either; commit the locks.
.PHONY: lock
lock: install
	$(PY) -m infra.aws.lock

demo: install
	$(PY) -m infra.local.demo

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

# contract/, harness/ and launchers/ are the packages stratus.contract, stratus.harness, stratus.launchers
# (setup.py); mypy, which finds modules by folder, sees them under those names through links in .typecheck/.
typecheck: install
	mkdir -p .typecheck/stratus
	for name in contract harness launchers; do ln -sfn ../../$$name .typecheck/stratus/$$name; done
	MYPYPATH=.typecheck $(PY) -m mypy -p stratus.contract -p stratus.harness -p stratus.launchers -p chalicelib -p det -p infra -m app

unit: install
	$(PY) -m pytest -q tests/unit tests/contract

integration: install
	$(PYTEST) --dist worksteal tests/integration

aws: install
	$(PYTEST) --dist worksteal tests/aws

e2e: install
	$(PYTEST_E2E) --dist loadgroup tests/e2e

test: lint typecheck
	$(PYTEST) --dist worksteal -m "not e2e"
	$(PYTEST_E2E) --dist loadgroup -m e2e

bench: install
	$(PY) bench/submit_latency.py --write
	$(PY) bench/pause_latency.py --write
	$(PY) bench/preemption_latency.py --write
	$(PY) bench/pack_throughput.py --write
	$(PY) bench/search_quality.py --write
	$(PY) bench/scheduling_pass.py --write
	$(PY) bench/stack_state.py --write
	$(PY) bench/elastic_allocation.py --write
	$(PY) bench/api_request_cost.py --write

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .typecheck
