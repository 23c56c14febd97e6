# One command surface for people and CI (.ci/run calls `make test`).
PYTHON ?= python

.PHONY: setup lint typecheck docs browser pgvector pgbouncer test test-core test-core-tls test-core-tls-pgbouncer test-upgrade unit bench

# apt-get as root, else through sudo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

setup:
	python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

typecheck:
	$(PYTHON) -m mypy fleet
	$(PYTHON) -m mypy --strict docs/plugins

# The docs site (mkdocs.yml, docs/) into site/: --strict fails on a broken link or anchor; the
# configuration and HTTP references are generated from the code as it builds.
docs:
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

# The UI's browser tests drive Debian's Chromium (Playwright downloads no browser here): installed
# when missing, so `make test` needs nothing installed by hand.
browser:
	@command -v chromium >/dev/null 2>&1 || [ -n "$$FLEET_TEST_CHROMIUM" ] || { \
	  echo "Chromium is missing (the UI's browser tests): installing Debian's"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium \
	  || echo "Chromium could not be installed: the browser tests will skip, or fail under CI=true" >&2; }

# Recall's in-database search on PostgreSQL needs the server's pgvector extension: Debian's
# package is installed when the files are missing and the package exists (Debian 13 and
# apt.postgresql.org have it; Debian 12 does not). Best effort, never failing: without it the
# pgvector tests skip, saying so, and exact search is tested as always.
pgvector:
	@ls /usr/share/postgresql/*/extension/vector.control >/dev/null 2>&1 || [ ! -d /usr/lib/postgresql ] || { \
	  v=$$(ls /usr/lib/postgresql | sort -n | tail -1); \
	  echo "pgvector is missing (recall's in-database search): trying Debian's postgresql-$$v-pgvector"; \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql-$$v-pgvector; } \
	  || echo "pgvector could not be installed: its tests skip, exact search is tested" >&2; }

# The connection-pooler tests start Debian's PgBouncer in front of the test database: installed
# when missing, so `make test` needs nothing installed by hand (under CI=true a missing
# pgbouncer fails those tests; locally they skip).
pgbouncer:
	@command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || [ -n "$$FLEET_TEST_PGBOUNCER" ] || { \
	  echo "PgBouncer is missing (the connection-pooler tests): installing Debian's"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq pgbouncer \
	  || echo "PgBouncer could not be installed: the pooler tests will skip, or fail under CI=true" >&2; }

# The whole suite: needs PostgreSQL and Redis on 127.0.0.1 (CI=true fails instead of skipping).
# Most tests wait on processes, the database and Redis more than they compute: they run in
# JOBS parallel pytest processes (each with its own template database and Redis database);
# those bound by wall-clock time (marked serial) run alone afterwards. Then the core tests
# against other backends, and the upgrade from the previous release.
JOBS ?= 4
test: lint typecheck docs browser pgvector pgbouncer
	$(PYTHON) -m pytest -n $(JOBS) -m "not serial and not upgrade" --durations=20
	$(PYTHON) -m pytest -m "serial and not upgrade" --durations=20
	$(MAKE) --no-print-directory test-core
	$(MAKE) --no-print-directory test-upgrade

# The dispatch invariant tests (marked core) again, against backends the tests start themselves
# (FLEET_TEST_BACKEND, tests/conftest.py): a TLS-only PostgreSQL reached with
# sslmode=verify-full, then PgBouncer in transaction mode in front of it (TLS on both sides);
# Redis on both: a TLS-only redis-server with an ACL user and password.
# One session each, alone: the crash-recovery tests are bound by wall-clock time.
test-core: test-core-tls test-core-tls-pgbouncer

test-core-tls:
	FLEET_TEST_BACKEND=tls $(PYTHON) -m pytest -m core tests/integration

test-core-tls-pgbouncer: pgbouncer
	FLEET_TEST_BACKEND=tls-pgbouncer $(PYTHON) -m pytest -m core tests/integration

# This release rolled out over the previous one under load, and runs handed back between the
# two (tests/upgrade, marked upgrade). The previous release is the commit that set the version
# before this one in pyproject.toml (FLEET_UPGRADE_FROM=<commit>: another), checked out in a git
# worktree with a venv of its own, both kept under ~/.cache/fleet-upgrade/<commit>
# (FLEET_UPGRADE_CACHE): the first run installs it (pip), later ones reuse it.
test-upgrade:
	$(PYTHON) -m tests.support.upgrade
	$(PYTHON) -m pytest -m upgrade tests/upgrade -rP --durations=5

# Pure and SQLite-only tests: seconds, no services.
unit:
	$(PYTHON) -m pytest -n 2 tests/unit

bench:
	$(PYTHON) -m bench.dispatch
	$(PYTHON) -m bench.api
