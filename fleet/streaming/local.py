"""Deltas within one process (embedded mode: the worker and the API are one process)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from fleet.domain.deltas import Delta
from fleet.domain.events import Position

#: Called with a task's new deltas, on the publishing thread (the hub moves them to its loop).
Subscriber = Callable[[uuid.UUID, list[Delta]], None]


class LocalChannel:
    """Each task's recent deltas in memory (at most ``buffer`` a task, the ``tasks`` most
    recently streamed, each kept ``ttl_s`` after its last delta), and the subscribers told of
    every new one."""

    def __init__(self, *, buffer: int, ttl_s: float, tasks: int = 1000) -> None:
        self.buffer, self.ttl_s, self.tasks = buffer, ttl_s, tasks
        self._lock = threading.Lock()
        self._published = threading.Condition(self._lock)
        self._buffers: OrderedDict[uuid.UUID, tuple[float, deque[Delta]]] = OrderedDict()
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Tell ``subscriber`` every delta from now on; returns how to stop."""
        with self._lock:
            self._subscribers.append(subscriber)

        def stop() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return stop

    def publish(self, task_id: uuid.UUID, delta: Delta) -> None:
        now = time.monotonic()
        with self._lock:
            entry = self._buffers.pop(task_id, None)
            kept = entry[1] if entry is not None else deque(maxlen=self.buffer)
            kept.append(delta)
            self._buffers[task_id] = (now + self.ttl_s, kept)
            while len(self._buffers) > self.tasks or (
                self._buffers and next(iter(self._buffers.values()))[0] < now
            ):
                self._buffers.popitem(last=False)
            subscribers = list(self._subscribers)
            self._published.notify_all()
        for subscriber in subscribers:
            subscriber(task_id, [delta])

    def forget(self, task_ids: Sequence[uuid.UUID]) -> int:
        """Drop these tasks' buffered deltas (an erasure); how many buffers went."""
        with self._lock:
            return sum(self._buffers.pop(t, None) is not None for t in task_ids)

    async def read(self, task_id: uuid.UUID) -> list[Delta]:
        with self._lock:
            entry = self._buffers.get(task_id)
            if entry is None or entry[0] < time.monotonic():
                return []
            return list(entry[1])

    def tail(self, task_id: uuid.UUID) -> Callable[[Position | None, float], list[Delta]]:
        """How to read the task's deltas: ``read(after, wait_s)``."""
        return lambda after, wait_s: self._tail(task_id, after, wait_s)

    def _tail(self, task_id: uuid.UUID, after: Position | None, wait_s: float) -> list[Delta]:
        """The task's buffered deltas after ``after``; none yet: waits up to ``wait_s`` for
        one."""
        with self._lock:
            found = self._after(task_id, after)
            if not found and wait_s > 0:
                self._published.wait(wait_s)
                found = self._after(task_id, after)
            return found

    def _after(self, task_id: uuid.UUID, after: Position | None) -> list[Delta]:
        entry = self._buffers.get(task_id)
        kept = entry[1] if entry is not None else ()
        return [d for d in kept if after is None or d.position > after]
