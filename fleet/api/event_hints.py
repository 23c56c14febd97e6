"""The streaming side of change hints (``fleet.dispatch.hints``): one Redis subscription per
``fleet serve`` to the channels of the tasks its hub watches.

While the subscription is up (``live``), the hub reads an idle task's marks rarely and reads a
task at once when its hint comes; when it drops, the hub is told and reads every watched task
on its usual short clock until the subscription is back (then once more at once: hints sent in
the gap are lost). The client does not retry by itself: a silent reconnect would hide that gap.
A subscription that stops answering its own PINGs counts as dropped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from fleet.constants import EVENTS_CLOSE_S
from fleet.dispatch.hints import channel
from fleet.dispatch.redis_target import RedisTarget

log = logging.getLogger(__name__)

#: Longest wait for a message before the listener looks for channels to (un)subscribe (seconds).
TICK_S = 0.2
#: While subscribed, a PING of its own this often; no answer in ``DEAD_S``: the connection is
#: taken for dead (a half-open one would otherwise look quiet until TCP gives up, ~15 min).
PING_S, DEAD_S = 5.0, 15.0
#: Wait before connecting again after the subscription failed (doubles up to ``RETRY_MAX_S``;
#: back to the minimum after a subscription that lasted ``STEADY_S``).
RETRY_MIN_S, RETRY_MAX_S, STEADY_S = 0.5, 5.0, 30.0
_LIVENESS = "fleet-live"


class HintListener:
    """Keeps one subscription to the channels of the ``wanted`` tasks; calls ``on_hint(task)``
    for each hint, and once each channel's subscription is active (a commit before that sent a
    hint nobody received), ``on_deltas(task, message)`` for each message of text deltas, and
    ``on_live(up)`` whenever the subscription comes up or goes down."""

    def __init__(
        self,
        redis: RedisTarget | str,
        on_hint: Callable[[uuid.UUID], None],
        on_live: Callable[[bool], None],
        *,
        on_deltas: Callable[[uuid.UUID, str], None] | None = None,
        tick_s: float = TICK_S,
    ) -> None:
        self.redis = RedisTarget.coerce(redis)
        self._on_hint, self._on_live, self._on_deltas = on_hint, on_live, on_deltas
        self.tick_s = tick_s
        self.wanted: set[uuid.UUID] = set()
        self._subscribed: set[uuid.UUID] = set()
        self._changed = asyncio.Event()
        self.live = False
        #: Its Redis client name (``CLIENT LIST`` shows which ``fleet serve`` holds it).
        self.name = f"fleet-events-{os.getpid()}-{id(self):x}"
        #: Hints received (tests, the benchmark).
        self.hints = 0
        self._last_heard = 0.0

    def want(self, task_id: uuid.UUID) -> None:
        self.wanted.add(task_id)
        self._changed.set()

    def drop(self, task_id: uuid.UUID) -> None:
        self.wanted.discard(task_id)
        self._changed.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        retry, failures = RETRY_MIN_S, 0
        while True:
            client = _client(self.redis, self.name)
            began = loop.time()
            try:
                await self._serve(client.pubsub())
            except Exception as exc:  # Redis away: the hub polls on its short clock meanwhile
                if loop.time() - began >= STEADY_S:
                    retry, failures = RETRY_MIN_S, 0
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(
                    level,
                    "task events: change hints unavailable (%s); reading every "
                    "watched task each second until they are back",
                    _brief(exc),
                )
            finally:
                self._set_live(False)
                with suppress(Exception):  # (a close that hangs must not hold a shutdown)
                    async with asyncio.timeout(EVENTS_CLOSE_S):
                        await client.aclose()
            await asyncio.sleep(retry)
            retry = min(retry * 2, RETRY_MAX_S)

    def _set_live(self, up: bool) -> None:
        if up != self.live:
            self.live = up
            self._on_live(up)

    async def _serve(self, pubsub: Any) -> None:
        loop = asyncio.get_running_loop()
        self._subscribed = set()
        self._changed.set()  # (re)subscribe everything wanted
        await pubsub.connect()
        pinged = self._last_heard = loop.time()
        while True:
            if self._changed.is_set():
                self._changed.clear()
                new = self.wanted - self._subscribed
                gone = self._subscribed - self.wanted
                if new:
                    await pubsub.subscribe(*(channel(t) for t in new))
                    self._subscribed |= new
                if gone:
                    await pubsub.unsubscribe(*(channel(t) for t in gone))
                    self._subscribed -= gone
            if not pubsub.subscribed:  # nothing to listen to: no liveness to keep either
                await self._changed.wait()
                pinged = self._last_heard = loop.time()  # that quiet was ours, not Redis's
                continue
            now = loop.time()
            if now - self._last_heard > DEAD_S:
                raise TimeoutError(f"no answer from Redis for {now - self._last_heard:.0f} s")
            if now - pinged >= PING_S:
                await pubsub.ping(_LIVENESS)
                pinged = now
            message = await pubsub.get_message(timeout=self.tick_s)
            while message is not None:
                self._handle(message)
                message = await pubsub.get_message(timeout=0)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        self._last_heard = asyncio.get_running_loop().time()
        if kind == "subscribe":
            self._set_live(True)
        if kind not in ("message", "subscribe"):
            return  # pong, unsubscribe
        try:
            task_id = uuid.UUID(str(message["channel"]).rsplit(":", 1)[-1])
        except ValueError:
            return
        if kind == "message":
            data = message.get("data")
            if data:  # text deltas (``fleet.streaming.redis``), not a change hint
                if self._on_deltas is not None:
                    self._on_deltas(task_id, data)
                return
            self.hints += 1
        self._on_hint(task_id)


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _client(redis: RedisTarget, name: str) -> Any:
    """No retries of its own: a reconnect the listener does not see would hide a gap in which
    hints were lost. (redis-py still reconnects the failed connection once before it raises;
    the listener then drops it and starts over, reading every watched task.)"""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return redis.async_client(
        decode_responses=True,
        client_name=name,
        socket_connect_timeout=5,
        health_check_interval=PING_S,
        retry=Retry(NoBackoff(), 0),
    )
