# Every target CI needs is here; .ci/run calls `make test`.
SHELL := /bin/bash
PY ?= python3
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
VENV := .venv
RUN := $(UV) run --frozen

.PHONY: up test test-fast lint fmt bench bench-service sync services clean client-wheel claude-code codex data

$(UV):
	$(PY) -m venv .tools
	.tools/bin/pip install -q uv

# bytecode compiled at install, not by every process of every start (and never, where
# PYTHONDONTWRITEBYTECODE is set): a warm `make up` imports, it does not compile (BENCHMARKS.md, issue 26)
COMPILE := $(UV) run --frozen --no-sync python -m compileall -q api worker

# the service and its test/lint tools
$(VENV)/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --compile-bytecode
	$(COMPILE)
	$(UV) run --frozen compactd prewarm
	@touch $@

# the service only (`make up`); --inexact keeps test tools a `make test` installed before
$(VENV)/.synced-service: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --no-dev --inexact --compile-bytecode
	$(COMPILE)
	$(UV) run --frozen --no-sync compactd prewarm
	@touch $@

sync: $(VENV)/.synced

## Install the service (not its test tools) and run it with embedded defaults (SQLite + embedded Redis).
up: $(VENV)/.synced-service
	$(UV) run --frozen --no-sync compactd up

# three pytest processes, a test file each at a time (--dist loadfile: a module's shared app or
# service stays in one process), the longest files first (tests/conftest.py LONGEST_FIRST): most
# integration tests wait on real processes, so on 2 cores a third overlaps those waits
# (docs/testing.md); TEST_WORKERS=0 runs them in one process
TEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

## Install what the tests need and run them all (real Redis, PostgreSQL, Celery workers).
test: sync
	@bash ops/services.sh start || echo "make: Redis/PostgreSQL unavailable; service tests will skip (CI=true makes them fail)"
	@rm -f $(VENV)/.pytest-exit; $(RUN) pytest $(XDIST) $(PYTEST_ARGS) || { code=$$?; echo $$code > $(VENV)/.pytest-exit; exit $$code; }

## Pure unit tests only: no services.
test-fast: sync
	$(RUN) pytest tests/unit -q

lint: sync
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) lint-imports
	$(RUN) mypy worker api ops

fmt: sync
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

## Benchmarks: figures go to BENCHMARKS.md by hand, with this command.
bench: sync
	$(RUN) python -m ops.bench

## Service benchmark only: fetch/append latency and fetch throughput against a real uvicorn.
bench-service: sync
	$(RUN) python -m ops.bench.service

## The client distribution (compactd-client, api/client) as a wheel and sdist in dist/.
client-wheel: $(UV)
	$(UV) build --package compactd-client --out-dir dist

## The pinned Claude Code CLI (ops/claude-code) for tests/e2e/test_claude_code.py: npm ci, no install
## scripts (cli-wrapper.cjs runs the native binary from the platform package).
CLAUDE_CODE := ops/claude-code/node_modules/.installed
$(CLAUDE_CODE): ops/claude-code/package.json ops/claude-code/package-lock.json
	cd ops/claude-code && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

claude-code: $(CLAUDE_CODE)

## The pinned Codex CLI (ops/codex) for tests/e2e/test_codex.py: npm ci, no install scripts (bin/codex.js
## runs the native binary from the platform package).
CODEX := ops/codex/node_modules/.installed
$(CODEX): ops/codex/package.json ops/codex/package-lock.json
	cd ops/codex && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

codex: $(CODEX)

## The third-party test data (transcripts) from its upstream repositories at pinned commits, each
## file's sha256 checked (ops/data/manifest.json), into ../shared/data or COMPACTD_DATA_DIR.
data: $(UV)
	$(UV) run --frozen --no-sync python -m ops.data.fetch

## Start Redis and PostgreSQL on loopback if they are not running (no Docker needed).
services:
	bash ops/services.sh start

clean:
	rm -rf $(VENV) .tools var .pytest_cache .hypothesis
