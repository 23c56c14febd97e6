# One command surface for people and CI (.ci/run calls `make test`).
PYTHON ?= python

.PHONY: setup lint typecheck browser test unit bench

# apt-get as root, else through sudo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

setup:
	python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

typecheck:
	$(PYTHON) -m mypy fleet

# The UI's browser tests drive Debian's Chromium (Playwright downloads no browser here): installed
# when missing, so `make test` needs nothing installed by hand.
browser:
	@command -v chromium >/dev/null 2>&1 || [ -n "$$FLEET_TEST_CHROMIUM" ] || { \
	  echo "Chromium is missing (the UI's browser tests): installing Debian's"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium \
	  || echo "Chromium could not be installed: the browser tests will skip, or fail under CI=true" >&2; }

# The whole suite: needs PostgreSQL and Redis on 127.0.0.1 (CI=true fails instead of skipping).
test: lint typecheck browser
	$(PYTHON) -m pytest

# Pure and SQLite-only tests: seconds, no services.
unit:
	$(PYTHON) -m pytest tests/unit

bench:
	$(PYTHON) -m bench.dispatch
	$(PYTHON) -m bench.api
