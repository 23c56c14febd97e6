"""Alembic, driven from fleet: upgrade to head, tell the current revision, check for drift."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from fleet.store import revision


def script_location() -> Path:
    """The migrations folder: packaged as ``fleet._migrations`` or beside the source tree."""
    try:
        packaged = Path(str(importlib.resources.files("fleet._migrations")))
        if (packaged / "env.py").is_file():
            return packaged
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head() -> str:
    script = ScriptDirectory.from_config(alembic_config())
    rev = script.get_current_head()
    assert rev is not None
    return rev


def current(engine: Engine) -> str | None:
    """The database's revision (None when fleet's tables were never created)."""
    return revision.current(engine)


def crossed(before: str | None, revision: str) -> bool:
    """Did an upgrade from ``before`` (None: an empty database, which holds nothing to move)
    apply ``revision``?"""
    if before is None:
        return False
    script = ScriptDirectory.from_config(alembic_config())
    applied = {r.revision for r in script.iterate_revisions(before, "base")}
    return revision not in applied


def upgrade(engine: Engine, revision: str = "head") -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def check(engine: Engine) -> None:
    """Raise if the tables and the migrated schema differ (``alembic check``)."""
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.check(cfg)
