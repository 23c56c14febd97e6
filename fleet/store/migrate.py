"""Alembic, driven from fleet: upgrade (expand steps, then contract steps on request), record
each applied revision with its kind, tell the current revision, check for drift.

A migration script says what it is with a module attribute, ``fleet_kind = "expand"`` (it only
adds) or ``"contract"`` (it removes or renames what an older release needs); the scripts before
0.2.0 say nothing: ``baseline`` (applied by a plain ``fleet migrate``; no release before 0.2.0
runs beside another).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, select

from fleet.domain import schema as rules
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


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def kinds() -> list[tuple[str, str]]:
    """Every revision, oldest first, with its kind (``fleet_kind``; none said: ``baseline``, a
    revision from before 0.2.0)."""
    found = []
    for script in _script().walk_revisions("base", "heads"):
        kind = getattr(script.module, "fleet_kind", "baseline")
        found.append((script.revision, kind if kind in rules.KINDS else "contract"))
    return sorted(found, key=lambda rk: rules.seq(rk[0]))


def pending(engine: Engine) -> list[tuple[str, str]]:
    """The revisions after the database's, oldest first, with their kinds."""
    have = current(engine)
    after = -1 if have is None else rules.seq(have)
    return [(r, k) for r, k in kinds() if rules.seq(r) > after]


def plan(engine: Engine, *, contract: bool) -> rules.Plan:
    """What ``fleet migrate`` applies to this database (``--contract``: the contract steps too)."""
    return rules.plan(pending(engine), contract=contract, fresh=current(engine) is None)


def _record(conn: Connection) -> None:
    """Write every applied revision (and its kind) the ledger does not hold yet; forget those
    above the database's revision (after a downgrade)."""
    from fleet.store.schema import schema_revisions as ledger

    if not inspect(conn).has_table(ledger.name):
        return
    have = revision.current_on(conn)
    top = -1 if have is None else rules.seq(have)
    held = set(conn.execute(select(ledger.c.revision)).scalars())
    rows = [{"revision": r, "kind": k} for r, k in kinds() if rules.seq(r) <= top and r not in held]
    if rows:
        conn.execute(ledger.insert(), rows)
    gone = [r for r in held if rules.seq(r) > top]
    if gone:
        conn.execute(ledger.delete().where(ledger.c.revision.in_(gone)))


def upgrade(engine: Engine, revision: str = "head") -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        _record(conn)


def downgrade(engine: Engine, revision: str) -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)
        _record(conn)


def check(engine: Engine) -> None:
    """Raise if the tables and the migrated schema differ (``alembic check``)."""
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.check(cfg)
