"""Clients of a Sentinel-watched master that close their sentinel connections with their own.

``Sentinel.master_for`` hands out a client whose pool asks the sentinels for the master; closing
the client leaves the connections to the sentinels open. A process that makes such clients over
and over (the event hub's subscriber reconnects, health checks) would pile them up.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis


class SentinelRedis(redis.Redis):
    """``redis.Redis`` of a sentinel master: ``close`` also closes the sentinel connections."""

    def close(self) -> None:
        super().close()
        manager: Any = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in manager.sentinels if manager is not None else ():
            sentinel.close()


class AsyncSentinelRedis(aioredis.Redis):
    """``redis.asyncio.Redis`` of a sentinel master: ``aclose`` also closes the sentinels'."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager: Any = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in manager.sentinels if manager is not None else ():
            await sentinel.aclose()


def master(sentinel: Any, name: str, **options: Any) -> Any:
    """The master ``name`` as a client of the class that matches ``sentinel`` (sync or async)."""
    cls = AsyncSentinelRedis if isinstance(sentinel, aioredis.sentinel.Sentinel) else SentinelRedis
    return sentinel.master_for(name, redis_class=cls, **options)
