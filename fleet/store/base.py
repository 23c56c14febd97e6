"""What every part of the store shares: the engine, transactions, redaction."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine

from fleet.domain.redaction import Redactor
from fleet.store.db import unavailable_on_outage


class StoreBase:
    """Holds the engine; subclasses add the named operations of one concern each."""

    def __init__(self, engine: Engine, redactor: Redactor) -> None:
        self.engine = engine
        self.redactor = redactor
        self.dialect = engine.dialect.name
        # Single reads need no BEGIN/COMMIT round trips.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._local = threading.local()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Let the store calls of this block (one drain) share one connection.

        Checking a connection out of the pool and resetting it costs more than most statements
        on the hot path, so a worker takes one for its whole drain.
        """
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with unavailable_on_outage():
            conn = self.engine.connect()
        self._local.conn = conn
        try:
            yield
        finally:
            self._local.conn = None
            conn.close()

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """One transaction; commits on success, rolls back on error, maps outages to 503."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            with unavailable_on_outage(), conn.begin():
                yield conn
            return
        with unavailable_on_outage(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads: no transaction on PostgreSQL, a short one on SQLite."""
        if self.dialect == "sqlite" or getattr(self._local, "conn", None) is not None:
            with self.tx() as conn:
                yield conn
            return
        with unavailable_on_outage(), self._autocommit.connect() as conn:
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()
