"""The event-loop intake's connections: a statement that finds them all busy waits a bounded
time, then is told the database is busy (503), and the connections are usable after."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.engine import make_url

from fleet.errors import Unavailable
from fleet.store.aio import AsyncStatements


def test_a_statement_waits_a_bounded_time_for_a_connection(pg_url: str) -> None:
    conninfo = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)

    async def scenario() -> None:
        statements = AsyncStatements(conninfo, size=1, slot_timeout=0.3)
        assert await statements.first("SELECT 0 AS zero", {}) == {"zero": 0}  # connected
        blocker = asyncio.create_task(statements.first("SELECT pg_sleep(30) AS slept", {}))
        while not statements._slots.locked():  # the blocker holds the only connection
            await asyncio.sleep(0)
        with pytest.raises(Unavailable, match=r"no connection free for 0\.3s"):
            await statements.first("SELECT 1 AS one", {})
        blocker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocker
        # the cancelled call gave its slot back (and dropped its connection): the next runs
        assert await statements.first("SELECT 2 AS two", {}) == {"two": 2}
        await statements.close()

    asyncio.run(scenario())
