"""The streaming side of change hints (``fleet.dispatch.hints``): one Redis subscription per
``fleet serve`` to the channels of the tasks its hub watches.

While the subscription is up (``live``), the hub reads an idle task's marks rarely and reads a
task at once when its hint comes; when it drops, the hub is told and reads every watched task
on its usual short clock until the subscription is back (then once more at once: hints sent in
the gap are lost). The client does not retry by itself: a silent reconnect would hide that gap.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from fleet.dispatch.hints import channel

log = logging.getLogger(__name__)

#: Longest wait for a message before the listener looks for channels to (un)subscribe (seconds).
TICK_S = 0.2
#: Wait before connecting again after the subscription failed (doubles up to ``RETRY_MAX_S``).
RETRY_MIN_S, RETRY_MAX_S = 0.5, 5.0


class HintListener:
    """Keeps one subscription to the channels of the ``wanted`` tasks; calls ``on_hint(task)``
    for each hint and ``on_live(up)`` whenever the subscription comes up or goes down."""

    def __init__(
        self,
        url: str,
        on_hint: Callable[[uuid.UUID], None],
        on_live: Callable[[bool], None],
        *,
        tick_s: float = TICK_S,
    ) -> None:
        self.url = url
        self._on_hint, self._on_live = on_hint, on_live
        self.tick_s = tick_s
        self.wanted: set[uuid.UUID] = set()
        self._subscribed: set[uuid.UUID] = set()
        self._changed = asyncio.Event()
        self.live = False
        #: Its Redis client name (``CLIENT LIST`` shows which ``fleet serve`` holds it).
        self.name = f"fleet-events-{os.getpid()}-{id(self):x}"
        #: Hints received (tests, the benchmark).
        self.hints = 0

    def want(self, task_id: uuid.UUID) -> None:
        self.wanted.add(task_id)
        self._changed.set()

    def drop(self, task_id: uuid.UUID) -> None:
        self.wanted.discard(task_id)
        self._changed.set()

    async def run(self) -> None:
        retry = RETRY_MIN_S
        while True:
            client = _client(self.url, self.name)
            try:
                await self._serve(client.pubsub())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: the hub polls on its short clock meanwhile
                if self.live:
                    log.warning("task events: change hints unavailable: %s", exc)
                else:
                    retry = min(retry * 2, RETRY_MAX_S)
            finally:
                self._set_live(False)
                with suppress(Exception):
                    await client.aclose()
            await asyncio.sleep(retry)

    def _set_live(self, up: bool) -> None:
        if up != self.live:
            self.live = up
            self._on_live(up)

    async def _serve(self, pubsub: Any) -> None:
        self._subscribed = set()
        await pubsub.ping()  # connected (a subscription with no channel yet stays quiet)
        while True:
            self._changed.clear()
            new = self.wanted - self._subscribed
            gone = self._subscribed - self.wanted
            if new:
                await pubsub.subscribe(*(channel(t) for t in new))
                self._subscribed |= new
            if gone:
                await pubsub.unsubscribe(*(channel(t) for t in gone))
                self._subscribed -= gone
            self._set_live(True)
            if not pubsub.subscribed:
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self.tick_s * 25)
                if not self._changed.is_set():
                    await pubsub.ping()
                continue
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=self.tick_s)
            while message is not None:
                if message.get("type") == "message":
                    self.hints += 1
                    name = message["channel"]
                    with suppress(ValueError):
                        self._on_hint(uuid.UUID(name.rsplit(":", 1)[-1]))
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0)


def _client(url: str, name: str) -> Any:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return aioredis.Redis.from_url(
        url,
        decode_responses=True,
        client_name=name,
        socket_connect_timeout=5,
        health_check_interval=5,
        retry=Retry(NoBackoff(), 0),
    )
