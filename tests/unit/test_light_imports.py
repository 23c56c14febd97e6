"""A process imports what it uses: the CLI does not load the store for --help, nor recall's
numpy, Alembic, the HTTP clients or the model SDKs to list tasks; no process loads SQLAlchemy's
ORM (the store's tables are Core tables). Each is checked in a fresh interpreter:
``sys.modules`` after the command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
sys.argv = ["fleet", *json.loads(sys.argv[1])]
from fleet.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""

#: What a Celery worker pool process imports before its first task.
WORKER_PROBE = """
import json, sys
import fleet.dispatch.tasks
print(json.dumps(sorted(sys.modules)))
"""

#: Never needed to print help or list tasks from the embedded store.
HEAVY = {"numpy", "alembic", "httpx", "jsonschema", "openai", "anthropic", "fastapi", "celery"}

#: SQLAlchemy's ORM: megabytes in every process, and the store uses Core only.
ORM = "sqlalchemy.orm"


def run_probe(probe: str, args: list[str], cwd: Path) -> set[str]:
    """The modules (full dotted names) a fresh interpreter holds after ``probe``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(args)],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def loaded(args: list[str], cwd: Path) -> set[str]:
    """The top-level packages the CLI imported to run ``fleet <args>``."""
    return {m.split(".")[0] for m in run_probe(PROBE, args, cwd)}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    return tmp_path


def test_help_loads_neither_the_store_nor_anything_heavy(project: Path) -> None:
    found = loaded(["--help"], project)
    assert not found & (HEAVY | {"sqlalchemy", "psycopg"})


def test_listing_tasks_loads_the_store_and_nothing_heavy(project: Path) -> None:
    loaded(["tasks", "ls"], project)  # the first use creates the embedded store (Alembic)
    modules = run_probe(PROBE, ["tasks", "ls"], project)
    found = {m.split(".")[0] for m in modules}
    assert "sqlalchemy" in found  # it did read the store
    assert not found & HEAVY
    assert ORM not in modules


def test_a_worker_process_does_not_load_the_orm(project: Path) -> None:
    modules = run_probe(WORKER_PROBE, [], project)
    assert "fleet.store.schema" in modules  # it did load the store's tables
    assert ORM not in modules
