"""PostgreSQL's single hot-path statements on an event loop: SubmitTask without a thread.

A request served on a thread-pool thread pays for the hop there and back, for the GIL hand-offs
between the pool's threads, and for checking a connection out of the engine's pool and resetting
it. The API's intake (``fleet.api.intake``) runs its one admission statement here instead, on a
few autocommit connections of this process's event loop, prepared on the server like
``StoreBase.first`` (neither prepares behind a transaction pooler). The statement is its own
transaction: when ``first`` returns, it is committed. The task event hub
(``fleet.api.event_hub``) reads its change marks the same way, on connections of its own: a poll
on a pool thread contended with the loop for the GIL and churned the thread's malloc arena
(futex, munmap, madvise and page faults, all absent otherwise).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row
from sqlalchemy import Engine

from fleet.errors import Unavailable
from fleet.store.db import conninfo, prepares, unavailable_on_outage

#: Seconds a statement waits for one of the connections (the engine pool's default too); then
#: the request is answered 503 with Retry-After instead of queueing without end.
SLOT_TIMEOUT_S = 30.0


class AsyncStatements:
    """Up to ``size`` connections, opened when first needed, each used by one call at a time."""

    def __init__(
        self,
        conninfo: str,
        size: int = 10,
        slot_timeout: float = SLOT_TIMEOUT_S,
        *,
        prepare: bool = True,
    ) -> None:
        self._conninfo = conninfo
        self._prepare = prepare
        self._slots = asyncio.Semaphore(size)
        self._slot_timeout = slot_timeout
        self._idle: list[psycopg.AsyncConnection[Any]] = []

    @classmethod
    def for_engine(cls, engine: Engine, size: int = 10) -> AsyncStatements:
        return cls(conninfo(engine.url), size, prepare=prepares(engine))

    async def first(self, sql: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """Run one statement (its own transaction); its first row as a dict (``Unavailable``
        when no connection frees up within the slot timeout)."""
        found = await self._run(sql, params, everything=False)
        return found[0] if found else None

    async def all(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run one statement (its own transaction); all its rows as dicts."""
        return await self._run(sql, params, everything=True)

    async def _run(
        self, sql: str, params: Mapping[str, Any], *, everything: bool
    ) -> list[dict[str, Any]]:
        if not self._slots.locked():
            await self._slots.acquire()  # free: no wait, no timer
        else:
            try:  # (a timer handle on this task; ``wait_for`` would start a task per wait)
                async with asyncio.timeout(self._slot_timeout):
                    await self._slots.acquire()
            except TimeoutError:
                raise Unavailable(
                    f"database busy: no connection free for {self._slot_timeout:g}s; retry"
                ) from None
        try:
            with unavailable_on_outage():
                conn = self._idle.pop() if self._idle else await self._connect()
                try:
                    async with conn.cursor(row_factory=dict_row) as cur:
                        await cur.execute(sql, params, prepare=self._prepare or None)
                        if everything:
                            found = await cur.fetchall()
                        else:
                            row = await cur.fetchone()
                            found = [row] if row is not None else []
                except BaseException:
                    # Failed or cancelled half-way: the connection's state is unknown.
                    await conn.close()
                    raise
            self._idle.append(conn)
            return found
        finally:
            self._slots.release()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=5, application_name="fleet"
        )
        if not self._prepare:  # behind a transaction pooler: nothing prepared on the server
            conn.prepare_threshold = None
        return conn

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
