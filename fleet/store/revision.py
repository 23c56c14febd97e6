"""The schema revision fleet needs and the one a database holds, without loading Alembic.

A process checks its database at start (``fleet.runtime.ensure_schema``, ``/readyz``); Alembic
and the migration scripts are loaded only when a schema must change (``fleet.store.migrate``).
``HEAD`` names the newest migration; a unit test fails when it is not Alembic's head.
"""

from __future__ import annotations

from sqlalchemy import Engine, inspect, text

#: The newest revision in ``migrations/versions`` (update it with each new migration).
HEAD = "0019_schedules"


def current(engine: Engine) -> str | None:
    """The database's revision (None when fleet's tables were never created)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return rows[0] if len(rows) == 1 else None if not rows else ",".join(sorted(rows))
