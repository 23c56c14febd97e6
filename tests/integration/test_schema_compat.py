"""A release beside the one before it on one database: expand steps only add (checked on the
migrated schema itself), a process runs on a database whose later steps all expand, and refuses,
in one line naming both revisions, one that contracted past it (SQLite and PostgreSQL)."""

from __future__ import annotations

import inspect as pyinspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from fleet.api import ops
from fleet.store import db, migrate, revision

REPO = Path(__file__).resolve().parents[2]


def _after(steps: int, name: str) -> str:
    """The name of a step ``steps`` after this release's newest (a newer release's)."""
    return f"{int(revision.HEAD[:4]) + steps:04d}_{name}"


NEWER = _after(1, "newer_table")
CONTRACTED = _after(2, "drop_old_column")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh' / 'fleet.db'}"
    return str(request.getfixturevalue("empty_pg_url"))


@pytest.fixture
def engine(empty_url: str) -> Iterator[Engine]:
    eng = db.create(empty_url)
    yield eng
    eng.dispose()


def _shape(engine: Engine) -> dict[str, Any]:
    """Tables → columns (type, nullable, default) and the names of indexes and constraints."""
    insp = inspect(engine)
    found: dict[str, Any] = {}
    for table in insp.get_table_names():
        cols = {
            c["name"]: (str(c["type"]), c["nullable"], c.get("default") is not None)
            for c in insp.get_columns(table)
        }
        named = {i["name"] for i in insp.get_indexes(table)}
        named |= {u["name"] for u in insp.get_unique_constraints(table) if u["name"]}
        found[table] = (cols, named)
    return found


def _expand_steps() -> list[tuple[str, str | None]]:
    return [
        (s.revision, s.down_revision)  # type: ignore[misc]
        for s in ScriptDirectory.from_config(migrate.alembic_config()).walk_revisions()
        if getattr(s.module, "fleet_kind", None) == "expand"
    ]


def test_every_step_marked_expand_only_adds(engine: Engine) -> None:
    steps = _expand_steps()
    assert steps, "0020_releases and later say fleet_kind = 'expand'"
    for rev, down in sorted(steps):
        assert down is not None
        migrate.upgrade(engine, down)
        before = _shape(engine)
        migrate.upgrade(engine, rev)
        after = _shape(engine)
        for table, (cols, named) in before.items():
            assert table in after, f"{rev} (expand) dropped or renamed table {table}"
            new_cols, new_named = after[table]
            for name, (kind, nullable, _) in cols.items():
                assert name in new_cols, f"{rev} (expand) dropped or renamed {table}.{name}"
                assert new_cols[name][0] == kind, f"{rev} (expand) changed {table}.{name}'s type"
                assert new_cols[name][1] or not nullable, f"{rev} made {table}.{name} NOT NULL"
            for name, (_, nullable, default) in new_cols.items():
                if name not in cols:
                    assert nullable or default, (
                        f"{rev} (expand) added {table}.{name} NOT NULL without a default: an "
                        "older release's inserts would fail"
                    )
            assert named <= new_named, f"{rev} (expand) dropped {sorted(named - new_named)}"


def test_no_step_marked_expand_drops_or_renames_in_its_source() -> None:
    """The same promise read from the scripts: an expand step's upgrade() says no drop/rename."""
    script = ScriptDirectory.from_config(migrate.alembic_config())
    forbidden = re.compile(r"drop_|rename|new_column_name|DROP |RENAME ", re.IGNORECASE)
    for rev, _ in _expand_steps():
        source = pyinspect.getsource(script.get_revision(rev).module.upgrade)
        assert not forbidden.search(source), f"{rev} is marked expand but its upgrade() removes"


def _move_to(engine: Engine, version: str, kind: str | None) -> None:
    """Pretend a newer release migrated the database to ``version`` (recorded as ``kind``)."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": version})
        if kind is not None:
            conn.execute(
                text(
                    "INSERT INTO schema_revisions (revision, kind, applied_at) "
                    "VALUES (:v, :k, CURRENT_TIMESTAMP)"
                ),
                {"v": version, "k": kind},
            )


def _ready(engine: Engine) -> str | None:
    return ops._database(SimpleNamespace(store=SimpleNamespace(engine=engine)))  # type: ignore[arg-type]


def test_a_release_runs_on_newer_expand_steps_and_refuses_a_contracted_schema(
    engine: Engine,
) -> None:
    migrate.upgrade(engine)
    assert revision.ledger(engine)[revision.HEAD] == "expand"
    assert revision.check(engine).ok and _ready(engine) is None

    _move_to(engine, NEWER, "expand")
    assert revision.check(engine).ok, "later steps only add: this release still runs"
    assert _ready(engine) is None

    _move_to(engine, CONTRACTED, "contract")
    refused = revision.check(engine)
    assert refused.action == "refuse"
    assert refused.message is not None and "\n" not in refused.message
    assert revision.HEAD in refused.message and CONTRACTED in refused.message
    assert _ready(engine) == refused.message  # /readyz says the same (503)


def test_a_gap_in_the_ledger_is_refused(engine: Engine) -> None:
    """A newer database that does not record every step after this release's: cannot tell."""
    migrate.upgrade(engine)
    _move_to(engine, _after(2, "unrecorded"), None)  # neither later step recorded
    found = revision.check(engine)
    assert found.action == "refuse" and "does not record" in (found.message or "")


@pytest.mark.pg
def test_a_process_older_than_the_contract_refuses_to_start(
    empty_pg_url: str, tmp_path: Path
) -> None:
    eng = db.create(empty_pg_url)
    try:
        migrate.upgrade(eng)
        _move_to(eng, NEWER, "expand")
        _move_to(eng, CONTRACTED, "contract")
    finally:
        eng.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env |= {
        "FLEET_DATABASE_URL": empty_pg_url,
        "FLEET_HOME": str(tmp_path / "home"),
        "FLEET_CONFIG_DIR": str(REPO / "config"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    (said,) = [line for line in proc.stderr.splitlines() if line.startswith("fleet:")]
    assert revision.HEAD in said and CONTRACTED in said
