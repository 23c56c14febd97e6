"""A process imports what it uses: the CLI does not load the store for --help, nor recall's
numpy, Alembic, the HTTP clients or the model SDKs to list tasks (each checked in a fresh
interpreter: ``sys.modules`` after the command)."""

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
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""

#: Never needed to print help or list tasks from the embedded store.
HEAVY = {"numpy", "alembic", "httpx", "jsonschema", "openai", "anthropic", "fastapi", "celery"}


def loaded(args: list[str], cwd: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    return tmp_path


def test_help_loads_neither_the_store_nor_anything_heavy(project: Path) -> None:
    found = loaded(["--help"], project)
    assert not found & (HEAVY | {"sqlalchemy", "psycopg"})


def test_listing_tasks_loads_the_store_and_nothing_heavy(project: Path) -> None:
    loaded(["tasks", "ls"], project)  # the first use creates the embedded store (Alembic)
    found = loaded(["tasks", "ls"], project)
    assert "sqlalchemy" in found  # it did read the store
    assert not found & HEAVY
