"""Wake-ups published from ``fleet serve``'s event loop, a batch per loop iteration.

The API admits on its event loop (``fleet.api.intake``); handing each hint to a thread cost a
signal and GIL hand-offs per request. Here the hints one loop iteration makes are published right
after it (``call_soon``) as one ``WAKE_PUSH`` script on an asyncio Redis client: the lease check
and the push in one round trip, as ``CeleryWaker.wake_many`` does. Hints made on other threads,
delayed ones (an ETA goes through Celery's ``send_task``) and every hint when the broker is not
the lease's Redis go to the background waker as before. A failed publish is logged and its marks
are dropped (the next admission tries again; the sweeper covers the rest): hints, never errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from fleet.dispatch.leases.redis import WAKE_PUSH, wake_push_args, woken_key
from fleet.dispatch.publish import WakeMessages
from fleet.dispatch.waker import BackgroundWaker

log = logging.getLogger(__name__)

Wake = tuple[uuid.UUID, datetime | None, bool]


class LoopWaker:
    def __init__(
        self,
        fallback: BackgroundWaker,
        loop: asyncio.AbstractEventLoop,
        direct: tuple[WakeMessages, str] | None,
    ) -> None:
        self._fallback = fallback
        self._loop = loop
        self._thread = threading.get_ident()
        self._batch: list[Wake] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._messages: WakeMessages | None = None
        self._redis: Any = None
        self._script: Any = None
        if direct is not None:
            self._messages, url = direct
            self._redis = aioredis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
            self._script = self._redis.register_script(WAKE_PUSH)

    def wake(
        self, conversation_id: uuid.UUID, at: datetime | None = None, *, force: bool = False
    ) -> None:
        if threading.get_ident() != self._thread or self._loop.is_closed():
            self._fallback.wake(conversation_id, at, force=force)
            return
        self._batch.append((conversation_id, at, force))
        if len(self._batch) == 1:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if self._script is None:
            if batch:
                self._fallback.wake_all(batch)
            return
        now = datetime.now(UTC)
        due = [w for w in batch if w[1] is None or w[1] <= now]
        later = [w for w in batch if w[1] is not None and w[1] > now]
        if later:
            self._fallback.wake_all(later)
        if due:
            task = self._loop.create_task(self._publish(due))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _publish(self, due: list[Wake]) -> None:
        assert self._messages is not None
        items = [(c, not force, self._messages.encode(c)) for c, _, force in due]
        keys, args = wake_push_args(self._messages.queue, items)
        try:
            await self._script(keys=keys, args=args, client=self._redis)
        except (RedisError, OSError) as exc:
            log.warning("wake-ups for %d conversation(s) not sent: %s", len(due), exc)
            marked = [woken_key(c) for c, check, _ in items if check]
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
