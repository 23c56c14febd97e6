"""Deltas through Redis: published by workers, buffered per task, read by the API.

``RedisChannel.publish`` queues a delta; a thread of the process sends what gathered in
``WINDOW_S`` in one pipeline: per task, its deltas as one entry of the task's stream (``XADD``
with an approximate ``MAXLEN``: at least that many deltas kept), the stream's TTL renewed when it
was not within a tenth of it, and the same text as one message on the task's change-hint channel
(``fleet.dispatch.hints``), which the API's hint subscription hands to the task's streams
(``fleet.api.event_hints``). A change hint is an empty message; a delta message is
not. What Redis does not take is lost to live watchers only: the journaled step carries the text.
A run that ends a model call waits for its deltas to be sent (``barrier``, which sends at once)
before it journals the step: a delta that reached a stream after its step's event would be
dropped there, and the deltas joined would miss it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any

from fleet.constants import DELTAS_KEY
from fleet.dispatch.hints import Losses, channel
from fleet.dispatch.redis_target import RedisTarget
from fleet.domain.deltas import Delta, decode, encode
from fleet.domain.events import Position

log = logging.getLogger(__name__)

#: Seconds deltas gather before they are sent together (what it adds to a delta's delay).
WINDOW_S = 0.005
#: Longest a run waits for its deltas to be sent before it journals their step (seconds).
BARRIER_S = 1.0
#: The stream entry's field.
FIELD = "d"


def key(task_id: uuid.UUID | str) -> str:
    return DELTAS_KEY.format(task=task_id)


class RedisChannel:
    """Publishes deltas from a thread of this process (started on first use, and again in a
    forked child)."""

    #: Deltas waiting at most; beyond, new ones are dropped (watchers get the journaled step).
    max_pending = 100_000
    warn_every_s = 60.0

    def __init__(
        self, client: Any, *, buffer: int, ttl_s: float, window_s: float = WINDOW_S
    ) -> None:
        self._client = client
        self.buffer, self.ttl_s, self.window_s = buffer, ttl_s, window_s
        self._pid = -1
        self._lock = threading.Lock()
        #: Deltas to send, and barriers (``None``, an event set once those before it went).
        self._pending: deque[tuple[uuid.UUID | None, Any]] = deque()
        self._ready = threading.Event()
        #: Set by a barrier: send now, without gathering for ``window_s``.
        self._now = threading.Event()
        self._thread: threading.Thread | None = None
        self._losses = Losses(
            "%d text delta(s) not sent to task event streams (%s); their watchers see that "
            "text when its step is journaled",
            self.warn_every_s,
        )
        #: Pipelines sent (the benchmark).
        self.batches = 0
        #: When each task's key had its TTL set last (the thread's), and when to drop old ones.
        self._renewed: dict[uuid.UUID, float] = {}
        self._prune_at = 0.0

    def publish(self, task_id: uuid.UUID, delta: Delta) -> None:
        if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
            self._start()
        if len(self._pending) >= self.max_pending:
            self._lose(1, "backlog")
            return
        self._pending.append((task_id, delta))
        if not self._ready.is_set():
            self._ready.set()

    def barrier(self, timeout_s: float = BARRIER_S) -> None:
        """Wait until every delta published before now was sent (or failed to be), at most
        ``timeout_s``: a run calls it at the end of a model call, before the step is journaled,
        so the step's last text reaches Redis (and the API's streams) before its event can
        (after it, a stream would drop that text as older than the event)."""
        if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
            return  # nothing published from this process yet
        done = threading.Event()
        self._pending.append((None, done))
        self._now.set()
        self._ready.set()
        done.wait(timeout_s)

    def tail(self, task_id: uuid.UUID) -> RedisTail:
        """How to read the task's deltas in order from its stream."""
        return RedisTail(self._client, task_id)

    def forget(self, task_ids: Sequence[uuid.UUID]) -> int:
        """Delete these tasks' buffered deltas (an erasure); how many buffers went."""
        gone = 0
        for i in range(0, len(task_ids), 500):
            gone += int(self._client.delete(*(key(t) for t in task_ids[i : i + 500])) or 0)
        return gone

    def flush(self, timeout_s: float = 1.0) -> None:
        """Wait until what is pending now was sent (tests, a process about to exit)."""
        deadline = time.monotonic() + timeout_s
        while self._pending and time.monotonic() < deadline:
            time.sleep(self.window_s)

    def _start(self) -> None:
        with self._lock:
            pid = os.getpid()
            if self._pid == pid and self._thread is not None and self._thread.is_alive():
                return
            if self._pid != pid:  # a forked child: the parent's queue is not ours
                self._pending = deque()
                self._ready = threading.Event()
                self._now = threading.Event()
                self._renewed = {}
            self._pid = pid
            self._thread = threading.Thread(target=self._run, name="fleet-deltas", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        pending, ready, now = self._pending, self._ready, self._now
        while True:
            ready.wait()
            if now.wait(self.window_s):
                now.clear()
            ready.clear()
            while pending:
                batch: dict[uuid.UUID, list[Delta]] = defaultdict(list)
                passed: list[threading.Event] = []
                for _ in range(min(len(pending), 4096)):
                    task_id, item = pending.popleft()
                    if task_id is None:
                        passed.append(item)
                    else:
                        batch[task_id].append(item)
                if batch:
                    self._send(batch)
                for done in passed:
                    done.set()

    def _send(self, batch: dict[uuid.UUID, list[Delta]]) -> None:
        """Per task, its deltas as one stream entry and one message (the same text), and its
        key's TTL set again if it was not within the last tenth of the TTL (so the buffer
        outlives the task's last delta by 0.9 to 1 times the TTL)."""
        now = time.monotonic()
        renewed, every = self._renewed, self.ttl_s / 10
        if now >= self._prune_at:  # entries that old renew next time anyway
            self._renewed = renewed = {t: at for t, at in renewed.items() if now - at < every}
            self._prune_at = now + every
        renewing: list[uuid.UUID] = []
        try:
            pipe = self._client.pipeline(transaction=False)
            ttl = max(1, round(self.ttl_s))
            for task_id, deltas in batch.items():
                k, message = key(task_id), encode(deltas)
                pipe.xadd(k, {FIELD: message}, maxlen=self.buffer, approximate=True)
                if now - renewed.get(task_id, float("-inf")) >= every:
                    pipe.expire(k, ttl)
                    renewing.append(task_id)
                pipe.publish(channel(task_id), message)
            pipe.execute()
            self.batches += 1
        except Exception as exc:  # live text only: the journaled step carries it
            self._lose(sum(len(d) for d in batch.values()), f"{type(exc).__name__}: {exc}")
            return
        for task_id in renewing:
            renewed[task_id] = now

    @property
    def lost(self) -> int:
        """Deltas not sent (backlog, Redis errors): tests and logs."""
        return self._losses.count

    def _lose(self, n: int, why: str) -> None:
        self._losses.add(n, why)


class RedisTail:
    """A task's deltas read in order from its stream, from the start, blocking while there are
    none (``fleet run`` and the SDK against the store in a fleet)."""

    def __init__(self, client: Any, task_id: uuid.UUID) -> None:
        self._client, self._key, self._last = client, key(task_id), "0"

    def __call__(self, after: Position | None, wait_s: float) -> list[Delta]:
        block = max(1, round(wait_s * 1000)) if wait_s > 0 else None
        found = self._client.xread({self._key: self._last}, block=block, count=1000)
        out: list[Delta] = []
        for _, entries in found or ():
            for entry_id, fields in entries:
                self._last = entry_id
                raw = fields.get(FIELD) or fields.get(FIELD.encode(), b"")
                out.extend(d for d in decode(raw) if after is None or d.position > after)
        return out


class RedisBuffer:
    """The API's reads of a task's buffered deltas."""

    def __init__(self, target: RedisTarget | str) -> None:
        self._client = RedisTarget.coerce(target).async_client(
            decode_responses=True, socket_connect_timeout=2, socket_timeout=2
        )

    async def read(self, task_id: uuid.UUID) -> list[Delta]:
        """The task's buffered deltas in publishing order (none when Redis does not answer:
        the stream goes on with the journaled steps)."""
        try:
            entries = await self._client.xrange(key(task_id))
        except Exception as exc:
            log.debug("task events: reading the deltas of %s failed: %s", task_id, exc)
            return []
        out: list[Delta] = []
        for _, fields in entries:
            out.extend(decode(fields.get(FIELD, "")))
        return out

    async def close(self) -> None:
        await self._client.aclose()
