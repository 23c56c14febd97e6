"""The schema revision fleet needs and the one a database holds, without loading Alembic.

A process checks its database at start (``fleet.runtime.ensure_schema``, ``/readyz``): it runs
on a database at its own revision, or at a newer one whose later steps only expand (the ledger
of applied revisions says so; ``fleet.domain.schema`` decides). Alembic and the migration
scripts are loaded only when a schema must change (``fleet.store.migrate``). ``HEAD`` names the
newest migration; a unit test fails when it is not Alembic's head.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, inspect, text

from fleet.domain.schema import Verdict, verdict

#: The newest revision in ``migrations/versions`` (update it with each new migration).
HEAD = "0025_data_rights"
#: The table that records each applied revision with its kind (``fleet.domain.schema``).
LEDGER = "schema_revisions"


def current(engine: Engine) -> str | None:
    """The database's revision (None when fleet's tables were never created)."""
    with engine.connect() as conn:
        return current_on(conn)


def current_on(conn: Connection) -> str | None:
    """``current`` on an open connection (inside a migration's transaction, say)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return rows[0] if len(rows) == 1 else None if not rows else ",".join(sorted(rows))


def ledger(engine: Engine) -> dict[str, str]:
    """Every revision the database recorded as applied, with its kind (none before 0020)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table(LEDGER):
            return {}
        rows = conn.execute(text(f"SELECT revision, kind FROM {LEDGER}")).all()
    return {r.revision: r.kind for r in rows}


def check(engine: Engine) -> Verdict:
    """May this release run on the database ``engine`` reaches?"""
    have = current(engine)
    if have == HEAD:
        return Verdict("run")
    return verdict(HEAD, have, ledger(engine))
