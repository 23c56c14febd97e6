"""One poller per process for every task event stream it serves, and ``follow``, the stream.

Many connections cost one statement per poll: the hub asks the store for the change marks of
every watched task that is due (``Store.event_marks``), backing off per task while it stays
idle, and wakes the followers of the tasks whose mark changed; only those read their events.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool

from fleet.domain.events import Position, TaskEvent
from fleet.domain.values import Task
from fleet.store import Store
from fleet.store.events import Mark

log = logging.getLogger(__name__)

#: A watched task's poll interval starts here after a change and doubles up to ``POLL_MAX_S``.
POLL_MIN_S, POLL_MAX_S = 0.1, 1.0

_UNSEEN = ("", -1, -1, -1)


@dataclass
class _Watch:
    subscribers: set[asyncio.Event] = field(default_factory=set)
    mark: Mark | None = _UNSEEN
    interval: float = POLL_MIN_S
    due: float = 0.0


class EventHub:
    """Watches tasks for many followers with one store read per poll."""

    def __init__(
        self, store: Store, *, min_s: float = POLL_MIN_S, max_s: float = POLL_MAX_S
    ) -> None:
        self.store = store
        self.min_s, self.max_s = min_s, max_s
        self._watches: dict[uuid.UUID, _Watch] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Store reads made (for tests and the benchmark).
        self.polls = 0
        #: Followers now (streams open).
        self.followers = 0

    @property
    def watched(self) -> int:
        return len(self._watches)

    @asynccontextmanager
    async def watch(self, task_id: uuid.UUID) -> AsyncIterator[asyncio.Event]:
        """An event set whenever ``task_id`` may have something new (and once at the start)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="fleet-event-hub")
        w = self._watches.setdefault(task_id, _Watch())
        changed = asyncio.Event()
        w.subscribers.add(changed)
        w.interval, w.due = self.min_s, 0.0
        self.followers += 1
        self._wake.set()
        try:
            yield changed
        finally:
            self.followers -= 1
            w.subscribers.discard(changed)
            if not w.subscribers and self._watches.get(task_id) is w:
                del self._watches[task_id]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            if not self._watches:
                await self._wake.wait()
                continue
            now = loop.time()
            if not any(w.due <= now for w in self._watches.values()):
                nearest = min(w.due for w in self._watches.values())
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), nearest - now)
                continue
            # Those due soon come along: many streams opened at different times share polls.
            due = [tid for tid, w in self._watches.items() if w.due <= now + self.max_s / 2]
            try:
                self.polls += 1
                marks = await run_in_threadpool(self.store.event_marks, due)
            except Exception as exc:  # an outage: followers wait; try again later
                log.warning("task events: reading the store failed: %s", exc)
                for tid in due:
                    if (w := self._watches.get(tid)) is not None:
                        w.due = loop.time() + self.max_s
                continue
            now = loop.time()
            for tid in due:
                w = self._watches.get(tid)
                if w is None:
                    continue
                mark = marks.get(tid)  # None: the task is gone (its followers find out)
                if mark != w.mark:
                    w.mark, w.interval = mark, self.min_s
                    for ev in w.subscribers:
                        ev.set()
                else:
                    w.interval = min(w.interval * 2, self.max_s)
                w.due = now + w.interval


async def follow(
    hub: EventHub, task_id: uuid.UUID, after: Position | None, *, max_s: float | None = None
) -> AsyncIterator[TaskEvent]:
    """The task's events after ``after`` as they are stored, until its end (or ``max_s``).

    Raises NotFound at once for a missing task; a task deleted later ends the stream.
    """
    from fleet.errors import NotFound

    loop = asyncio.get_running_loop()
    deadline = None if max_s is None else loop.time() + max_s
    first = True
    async with hub.watch(task_id) as changed:
        while True:
            changed.clear()  # before the read: a change during it wakes the next wait
            try:
                task, events = await run_in_threadpool(hub.store.task_events, task_id, after)
            except NotFound:
                if first:
                    raise
                return
            first = False
            for ev in events:
                yield ev
                after = ev.position
            if task.status.terminal:  # its ``end`` was sent (now or before this stream)
                return
            if deadline is None:
                await changed.wait()
                continue
            left = deadline - loop.time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(changed.wait(), left)
            except TimeoutError:
                return


async def snapshot(hub: EventHub, task_id: uuid.UUID) -> tuple[Task, Position | None]:
    """The task now and the position of its newest event (to follow from)."""
    task, events = await run_in_threadpool(hub.store.task_events, task_id, None)
    return task, events[-1].position if events else None
