# The two commands: `make run` (dev server + UI + worker) and `make test` (lint, types, tests).
# Each does its own setup: a virtualenv in .venv with the project installed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test lint typecheck pytest pytest-cacheless bench browser tools api-docs lock clean

# Installs are pinned by constraints.txt (the lock; `make lock` rewrites it from .venv).
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) -m durability.run

# Debian's chromium, for the Temporal UI test (no browser download at run time).
browser:
	command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# dclint (compose-spec schema + lint) for tests/infrastructure/test_compose.py, pinned, into .tools/.
DCLINT_VERSION := 3.1.0
DCLINT := .tools/node_modules/.bin/dclint
# The TypeScript caller for tests/product/test_typescript_caller.py: installed from its lock (versions
# pinned in examples/typescript/package.json) and compiled with its own tsc into dist/.
TS_EXAMPLE := examples/typescript
TS_INSTALLED := $(TS_EXAMPLE)/node_modules/.installed
TS_DEMO := $(TS_EXAMPLE)/dist/demo.js
# checkov (the Kubernetes manifests' security scan) for tests/infrastructure/test_kubernetes.py,
# pinned, in a virtualenv of its own: it requires packaging<24, which the lock does not allow.
CHECKOV_VERSION := 3.3.30
CHECKOV := .tools/checkov/bin/checkov
tools: $(DCLINT) $(TS_DEMO) $(CHECKOV)
$(DCLINT):
	npm install --silent --no-audit --no-fund --prefix .tools dclint@$(DCLINT_VERSION)
$(CHECKOV):
	$(PYTHON) -m venv .tools/checkov
	.tools/checkov/bin/pip install -q checkov==$(CHECKOV_VERSION)
$(TS_INSTALLED): $(TS_EXAMPLE)/package.json $(TS_EXAMPLE)/package-lock.json
	npm ci --prefix $(TS_EXAMPLE) --no-audit --no-fund --silent
	touch $@
$(TS_DEMO): $(TS_INSTALLED) $(TS_EXAMPLE)/tsconfig.json $(wildcard $(TS_EXAMPLE)/src/*.ts)
	$(TS_EXAMPLE)/node_modules/.bin/tsc -p $(TS_EXAMPLE)/tsconfig.json
	touch $@

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Test processes (pytest-xdist), each with its own dev server: the tests mostly wait on
# servers and timers, so more processes than cores finish sooner (`TEST_PROCESSES=0`: one).
# Each process takes the next test as it finishes one (`--maxschedchunk 1`), in collection
# order, which puts the tests marked `slow` first (tests/conftest.py).
TEST_PROCESSES ?= 4
PYTEST := $(PY) -m pytest -q -n $(TEST_PROCESSES) --dist load --maxschedchunk 1

pytest: $(STAMP) browser tools
	$(PYTEST)

# The tests that send every message (marked `cacheless`), once more on workers that cache no
# workflow: every workflow task is replayed from the first event, as on a worker that just started.
pytest-cacheless: $(STAMP)
	DURABILITY_TEST_MAX_CACHED_WORKFLOWS=0 $(PYTEST) -m cacheless

test: lint typecheck pytest pytest-cacheless

# Side-by-side benchmarks (durability vs native Schedules and the server's floors); see bench/README.md.
bench: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,bench]'
	$(PY) -m bench

# The Python API reference, generated from the docstrings (pdoc), into build/api.
api-docs: $(STAMP)
	$(PY) -m durability.apidocs build/api

lock: $(STAMP)
	{ head -2 constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^durability'; } > constraints.tmp
	mv constraints.tmp constraints.txt

clean:
	rm -rf $(VENV) .tools data .mypy_cache .ruff_cache .pytest_cache
