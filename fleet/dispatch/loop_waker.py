"""Wake-ups published from ``fleet serve``'s event loop, a batch per loop iteration.

The API admits on its event loop (``fleet.api.intake``); handing each hint to a thread cost a
signal and GIL hand-offs per request. Here the hints one loop iteration makes are published right
after it (``call_soon``) as one ``WAKE_FAIR`` script on an asyncio Redis client: the lease check
and the fair queue's add in one round trip, as ``CeleryWaker.wake_many`` does. Hints made on
other threads, delayed ones (an ETA goes through Celery's ``send_task``) and every hint when the
broker is not the lease's Redis go to the background waker as before. A failed publish is logged
and its marks are dropped (the next admission tries again; the sweeper covers the rest): hints,
never errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from redis.exceptions import RedisError

from fleet.dispatch.fair import WAKE_FAIR, Due, FairTurns
from fleet.dispatch.leases.redis import lease_keys, woken_key
from fleet.dispatch.redis_target import RedisTarget
from fleet.dispatch.waker import BackgroundWaker, Wake, WakeBatches

log = logging.getLogger(__name__)


class LoopWaker(WakeBatches):
    def __init__(
        self,
        fallback: BackgroundWaker,
        loop: asyncio.AbstractEventLoop,
        direct: tuple[FairTurns, RedisTarget] | None,
        tenants: Callable[[str], tuple[int, int]] = lambda _: (1, 0),
    ) -> None:
        self._fallback = fallback
        self._loop = loop
        self._thread = threading.get_ident()
        self._batch: list[Wake] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._turns: FairTurns | None = None
        self._tenants = tenants
        self._redis: Any = None
        self._script: Any = None
        if direct is not None:
            self._turns, target = direct
            self._redis = target.async_client(socket_connect_timeout=5, socket_timeout=10)
            self._script = self._redis.register_script(WAKE_FAIR)

    def wake_many(self, wakes: Sequence[Wake]) -> None:
        if threading.get_ident() != self._thread or self._loop.is_closed():
            self._fallback.wake_many(wakes)
            return
        first = not self._batch
        self._batch.extend(wakes)
        if first and self._batch:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if self._script is None:
            if batch:
                self._fallback.wake_many(batch)
            return
        now = datetime.now(UTC)
        due = [w for w in batch if w.at is None or w.at <= now]
        later = [w for w in batch if w.at is not None and w.at > now]
        if later:
            self._fallback.wake_many(later)
        if due:
            task = self._loop.create_task(self._publish(due))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _publish(self, due: list[Wake]) -> None:
        assert self._turns is not None
        items = [
            (Due(w.conversation_id, w.tenant, w.priority, *self._tenants(w.tenant)), not w.force)
            for w in due
        ]
        keys, args = self._turns.wake_args(items, [lease_keys(w.conversation_id) for w in due])
        try:
            await self._script(keys=keys, args=args, client=self._redis)
        except (RedisError, OSError) as exc:
            log.warning("wake-ups for %d conversation(s) not sent: %s", len(due), exc)
            marked = [woken_key(w.conversation_id) for w in due if not w.force]
            if marked:
                with contextlib.suppress(RedisError, OSError):
                    await self._redis.delete(*marked)

    async def close(self) -> None:
        """Publish what is collected and wait for the publishes under way."""
        self._flush()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        if self._redis is not None:
            await self._redis.aclose()
