# One command surface for people and CI (.ci/run calls `make test`).
PYTHON ?= python

.PHONY: setup lint typecheck test unit bench

setup:
	python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

typecheck:
	$(PYTHON) -m mypy fleet

# The whole suite: needs PostgreSQL and Redis on 127.0.0.1 (CI=true fails instead of skipping).
test: lint typecheck
	$(PYTHON) -m pytest

# Pure and SQLite-only tests: seconds, no services.
unit:
	$(PYTHON) -m pytest tests/unit

bench:
	$(PYTHON) -m bench.dispatch
	$(PYTHON) -m bench.api
