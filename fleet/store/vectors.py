"""Which nearest-neighbour search recall uses on this database: probed once, at start.

PostgreSQL: ``pgvector`` when the server has the ``vector`` extension (created if it is
available but not yet created in the database); SQLite: ``sqlite-vec`` when the package's
loadable extension loads into this Python's sqlite3. Otherwise ``exact``: the worker scores the
bounded candidate set itself. Every method gives the same results (the same candidates, filters,
top_k and threshold); a vector method only moves the scoring into the database.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, Engine, event, text

Method = Literal["pgvector", "sqlite-vec", "exact"]

#: How to get pgvector on Debian's PostgreSQL (shown when the server lacks it).
PGVECTOR_HINT = (
    "install pgvector on the server (Debian/Ubuntu: apt-get install postgresql-15-pgvector, "
    "or build it from source) to search in the database"
)


@dataclass(frozen=True, slots=True)
class VectorSearch:
    """The search recall uses, and why (for ``fleet check`` and the provenance)."""

    method: Method
    detail: str


EXACT = VectorSearch("exact", "exact search (not probed)")


def probe(engine: Engine, *, create: bool = True) -> VectorSearch:
    """Find (and, with ``create``, enable) the database's vector search.

    ``create=False`` changes nothing: an extension that is available but not created is
    reported as what ``fleet`` will create at start.
    """
    if engine.dialect.name == "postgresql":
        return _postgres(engine, create=create)
    if engine.dialect.name == "sqlite":
        return _sqlite(engine, install=create)
    return VectorSearch("exact", f"exact search ({engine.dialect.name} has no vector search)")


def _postgres(engine: Engine, *, create: bool) -> VectorSearch:
    try:
        import pgvector.sqlalchemy  # noqa: F401
    except ImportError:
        return VectorSearch("exact", "exact search (the pgvector package is not installed)")
    with engine.connect() as conn:
        installed = _installed(conn)
        if installed is not None:
            return VectorSearch("pgvector", f"pgvector (extension vector {installed})")
        available = conn.execute(
            text("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
        ).scalar()
    if available is None:
        return VectorSearch(
            "exact", f"exact search (the server has no vector extension: {PGVECTOR_HINT})"
        )
    if not create:
        return VectorSearch(
            "pgvector",
            f"pgvector (the server has vector {available}; fleet creates the extension at start)",
        )
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    except Exception as exc:  # e.g. no privilege to create extensions
        from fleet.store.db import describe

        with engine.connect() as conn:  # another process may have created it meanwhile
            installed = _installed(conn)
        if installed is not None:
            return VectorSearch("pgvector", f"pgvector (extension vector {installed})")
        return VectorSearch(
            "exact",
            f"exact search (CREATE EXTENSION vector failed: {describe(exc)}; a superuser can "
            "run it once in this database)",
        )
    return VectorSearch("pgvector", f"pgvector (extension vector {available}, created)")


def _installed(conn: Connection) -> str | None:
    found = conn.execute(
        text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    ).scalar()
    return None if found is None else str(found)


def _load(conn: sqlite3.Connection) -> None:
    import sqlite_vec

    conn.enable_load_extension(True)
    try:
        sqlite_vec.load(conn)
    finally:
        conn.enable_load_extension(False)


def _sqlite(engine: Engine, *, install: bool) -> VectorSearch:
    try:
        import sqlite_vec  # noqa: F401
    except ImportError:
        return VectorSearch("exact", "exact search (the sqlite-vec package is not installed)")
    dbapi: Any = engine.dialect.loaded_dbapi  # the stdlib's sqlite3 unless told otherwise
    if not hasattr(dbapi.Connection, "enable_load_extension"):
        return VectorSearch(
            "exact",
            "exact search (this Python's sqlite3 cannot load extensions, so sqlite-vec "
            "cannot load; a Python built with loadable SQLite extensions can)",
        )
    try:
        probe_conn = dbapi.connect(":memory:")
        try:
            _load(probe_conn)
            version = probe_conn.execute("SELECT vec_version()").fetchone()[0]
        finally:
            probe_conn.close()
    except Exception as exc:
        return VectorSearch("exact", f"exact search (sqlite-vec did not load: {exc})")
    if install:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
            _load(dbapi_conn)

        engine.dispose()  # connections made before load it when they are made anew
    return VectorSearch("sqlite-vec", f"sqlite-vec {version}")
