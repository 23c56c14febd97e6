"""Stop a worker at an exact statement: hold a lock it needs, see it wait, kill it there."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from tests.support.fleet import wait_for


class Blocker:
    """A PostgreSQL session of the test's own that holds locks (``hold``, then ``release``), and
    a second one that watches which session waits on them (``waiting``) and when a dead
    process's session has ended (``ended``)."""

    def __init__(self, pg_url: str) -> None:
        self._engine = sa.create_engine(pg_url)
        self._holder = self._engine.connect()
        self._watch = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._pid = self._holder.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        self._holder.commit()
        self._tx: sa.RootTransaction | None = None

    def __enter__(self) -> Blocker:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tx is not None and self._tx.is_active:
            self._tx.rollback()
        self._holder.close()
        self._watch.close()
        self._engine.dispose()

    def hold(self, sql: str, params: dict[str, Any]) -> None:
        """Run ``sql`` in a transaction left open: the locks it takes stay held."""
        self._tx = self._holder.begin()
        self._holder.execute(sa.text(sql), params)

    def release(self) -> None:
        assert self._tx is not None
        self._tx.rollback()

    def waiting(self, query_prefix: str, timeout: float, what: str) -> int:
        """The pid of the session waiting on our locks in a statement starting so."""

        def found() -> int | None:
            pid: int | None = self._watch.execute(
                sa.text(
                    "SELECT pid FROM pg_stat_activity WHERE :ours = ANY(pg_blocking_pids(pid))"
                    " AND query ILIKE :prefix"
                ),
                {"ours": self._pid, "prefix": f"{query_prefix}%"},
            ).scalar()
            return pid

        pid = wait_for(found, timeout, what=what)
        assert pid is not None
        return pid

    def ended(self, pid: int, timeout: float = 30) -> None:
        """Wait until session ``pid`` is gone (its process was killed: PostgreSQL notices)."""

        def gone() -> bool:
            count = self._watch.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar_one()
            return bool(count == 0)

        wait_for(gone, timeout, what="the dead worker's database session to end")
