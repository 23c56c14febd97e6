"""What every part of the store shares: the engine, transactions, redaction."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Connection, Engine

from fleet.domain.redaction import Redactor
from fleet.store.db import prepares, unavailable_on_outage


class StoreBase:
    """Holds the engine; subclasses add the named operations of one concern each."""

    def __init__(self, engine: Engine, redactor: Redactor) -> None:
        self.engine = engine
        self.redactor = redactor
        self.dialect = engine.dialect.name
        #: Hot-path statements are prepared on the server (not behind a transaction pooler).
        self.prepares = prepares(engine)
        # Single reads need no BEGIN/COMMIT round trips.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._local = threading.local()
        #: Every thread's pinned connection, so ``dispose`` closes them all (a connection left
        #: checked out by another thread would otherwise be closed only by the collector).
        self._pinned: set[Connection] = set()
        self._pinned_lock = threading.Lock()

    @property
    def one_statement_path(self) -> bool:
        """PostgreSQL runs each hot-path operation as one statement (see ``fleet.store.pg``)."""
        return self.dialect == "postgresql"

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Let this thread's single-statement calls share one connection, kept between blocks.

        Checking a connection out of the pool and resetting it costs about as much as a
        statement on the hot path, so a worker thread keeps one autocommit connection. A
        failure inside the block drops it (the next block connects afresh).
        """
        if self.dialect == "sqlite" or getattr(self._local, "active", False):
            yield
            return
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.invalidated or conn.closed:
            stale = conn
            with unavailable_on_outage():
                conn = self._autocommit.connect()
            self._local.conn = conn
            with self._pinned_lock:
                self._pinned.discard(stale)
                self._pinned.add(conn)
        self._local.active = True
        try:
            yield
        except BaseException:
            self._local.conn = None
            with self._pinned_lock:
                self._pinned.discard(conn)
            conn.close()
            raise
        finally:
            self._local.active = False

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """One transaction; commits on success, rolls back on error, maps outages to 503."""
        with unavailable_on_outage(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def single(self) -> Iterator[Connection]:
        """A connection for statements that are their own transaction (autocommit).

        On SQLite (no autocommit engine here) it is a short transaction.
        """
        if self.dialect == "sqlite":
            with self.tx() as conn:
                yield conn
            return
        pinned: Connection | None = getattr(self._local, "conn", None)
        if pinned is not None and getattr(self._local, "active", False):
            with unavailable_on_outage():
                yield pinned
            return
        with unavailable_on_outage(), self._autocommit.connect() as conn:
            yield conn

    def first(self, sql: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """Run one PostgreSQL statement on the driver connection; its first row as a dict.

        For the hot path's single statements (``fleet.store.pg``): psycopg prepares them on the
        server (unless a transaction pooler is configured) and the rows come back without
        SQLAlchemy's per-statement result machinery.
        """
        from psycopg.rows import dict_row

        with self.single() as conn, unavailable_on_outage():
            driver = conn.connection.driver_connection
            assert driver is not None
            with driver.cursor(row_factory=dict_row) as cur:
                cur.execute(sql, params, prepare=self.prepares or None)
                row: dict[str, Any] | None = cur.fetchone()
                return row

    def read(self) -> AbstractContextManager[Connection]:
        """A connection for reads: no transaction on PostgreSQL, a short deferred one on SQLite
        (a reader does not wait for a writer in WAL mode, not even one of this thread)."""
        if self.dialect == "sqlite":
            return self._sqlite_read()
        return self.single()

    @contextmanager
    def _sqlite_read(self) -> Iterator[Connection]:
        with (
            unavailable_on_outage(),
            self.engine.connect() as conn,
            conn.execution_options(fleet_read=True).begin(),
        ):
            yield conn

    def dispose(self) -> None:
        """Close every connection of this store: each thread's pinned one, then the pool."""
        self._local.conn = None
        with self._pinned_lock:
            pinned, self._pinned = self._pinned, set()
        for conn in pinned:
            conn.close()
        self.engine.dispose()
