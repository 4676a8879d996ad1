# The verbs a newcomer needs. Only Python is assumed: uv is installed into .cache/ when missing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The uv that made uv.lock; `make` installs this one when there is no uv on PATH.
UV_VERSION := 0.13.9
UV_SYSTEM := $(shell command -v uv 2>/dev/null)
UV := $(if $(UV_SYSTEM),$(UV_SYSTEM),.cache/uv/bin/uv)
# uv's own cache stays under the git-ignored .cache/ too, unless you chose one.
UV_CACHE_DIR ?= $(CURDIR)/.cache/uv-cache
export UV_CACHE_DIR
RUN := $(UV) run --frozen
PACKAGES := langgraph-checkpoint-plainredis agentstate-reducer agentstate-reducer-langgraph
SRC := packages/langgraph-checkpoint-plainredis/src packages/agentstate-reducer/src \
       packages/agentstate-reducer-langgraph/src tests-integration/src
PYTEST_ARGS ?=

.PHONY: help
help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

ifeq ($(UV_SYSTEM),)
# A uv in .cache/ of another version (an older pin) is replaced.
ifneq ($(word 2,$(shell .cache/uv/bin/uv --version 2>/dev/null)),$(UV_VERSION))
.PHONY: .cache/uv/bin/uv
endif
endif
.cache/uv/bin/uv:
	python3 -m venv .cache/uv
	.cache/uv/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

.venv/.synced: $(UV) uv.lock pyproject.toml $(wildcard packages/*/pyproject.toml) tests-integration/pyproject.toml
	$(UV) sync --frozen
	@touch $@

.PHONY: sync
sync: .venv/.synced  ## create .venv with every package and tool

.PHONY: servers
servers: sync  ## download, check and cache the test servers (Redis 5/6/7/8, Valkey, PostgreSQL 15/18)
	$(RUN) python -m agentstate_testkit provision

.PHONY: lint
lint: sync  ## ruff and strict mypy
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy $(SRC)

.PHONY: test-unit
test-unit: sync  ## each package's own tests (real servers where they need one)
	$(RUN) pytest packages --durations=15 $(PYTEST_ARGS)

.PHONY: test-integration
test-integration: sync  ## the cross-package suite, the matrix and the harness checks
	$(RUN) pytest tests-integration -m "not slow" --durations=15 $(PYTEST_ARGS)

.PHONY: test-reliability
test-reliability: sync  ## the long soak variants of the fault and load tests (marker `slow`)
	$(RUN) pytest tests-integration/tests/reliability -m slow $(PYTEST_ARGS)

.PHONY: test-matrix
test-matrix: sync  ## the integration matrix: every saver x wrapping x server, wheels, release check
	$(RUN) pytest tests-integration/tests/matrix $(PYTEST_ARGS)

.PHONY: release-check
release-check:  ## versions, CHANGELOGs and tags agree (RELEASING.md)
	python3 scripts/check_release.py

.PHONY: test
test: lint docs release-check servers test-unit test-integration  ## everything CI runs

.PHONY: demo
demo: sync  ## a chat graph on plain Redis with a bounded window (REDIS_URL=... to use yours; ARGS=--sync)
	$(RUN) python examples/demo.py $(ARGS)

.PHONY: bench
bench: sync  ## benchmarks, side by side in one run: bench/results/report.md and plots
	started=$$(date +%s) && \
	$(RUN) python bench/bench_savers.py $(BENCH_ARGS) && \
	$(RUN) python bench/bench_storage.py && \
	$(RUN) python bench/bench_load.py && \
	$(RUN) python bench/bench_reducer.py && \
	$(RUN) python bench/report.py --started $$started

.PHONY: docs
docs: sync  ## the documentation site, built strictly into site/ (with bench/results/ when present)
	NO_MKDOCS_2_WARNING=1 $(RUN) mkdocs build --strict --site-dir site

.PHONY: build
build: sync  ## one wheel and one sdist per package into dist/
	rm -rf dist
	for p in $(PACKAGES); do $(UV) build --package $$p --no-sources --out-dir dist || exit 1; done

.PHONY: clean
clean:  ## remove build output (dist, the docs site) and caches (keeps downloaded servers)
	rm -rf dist site .pytest_cache .mypy_cache .ruff_cache .hypothesis
