"""The schema revision read without Alembic agrees with Alembic's."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine

from fleet.store import migrate, revision


def test_head_names_the_newest_migration() -> None:
    assert migrate.head() == revision.HEAD, (
        "fleet/store/revision.py HEAD must name the newest migration in migrations/versions"
    )


def test_current_reads_the_database_alembic_migrated(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'fleet.db'}")
    assert revision.current(engine) is None  # nothing created yet
    migrate.upgrade(engine, "0015_tenants")
    assert revision.current(engine) == "0015_tenants"
    migrate.upgrade(engine)
    assert revision.current(engine) == revision.HEAD
    engine.dispose()
