"""One poller per process for every task event stream it serves (``fleet.api.event_stream``
is the stream that follows it).

Many connections cost one statement per poll: the hub asks the store for the change marks of
every watched task that is due (``Store.event_marks``), backing off per task while it stays
idle, and wakes the followers of the tasks whose mark changed; only those read their events.

With Redis (``hints_url``), whoever commits a change to a task publishes a hint
(``fleet.dispatch.hints``) and the hub subscribes to the hints of the tasks it watches
(``fleet.api.event_hints``): a hinted task is read at once, and an idle one backs off to a read
every ``idle_s`` seconds (a hint that never came costs that much latency, no event). Without the
subscription (embedded mode, Redis away) idle tasks are read every ``max_s`` seconds.

Text deltas (``fleet.streaming``) come to the hub pushed, not read: from the hint subscription
(Redis) or the process's own channel (embedded); the hub hands them to the followers of their
task, and each stream decides with its ``Cursor`` what to send (``updates``).

An idle follower is one ``Follower`` waiting on its event: no task, timer or store read of its
own between changes (a keep-alive is a timer handle on the loop). When the server starts to
shut down (uvicorn's ``should_exit``), the hub ends every stream: clients reconnect elsewhere
with their last event id instead of holding the graceful shutdown open.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from starlette.concurrency import run_in_threadpool

from fleet.constants import EVENTS_CLOSE_S
from fleet.dispatch.redis_target import RedisTarget
from fleet.domain.deltas import Delta
from fleet.domain.deltas import decode as decode_deltas
from fleet.store import Store
from fleet.store.aio import AsyncStatements
from fleet.store.events import Mark, marks_of

if TYPE_CHECKING:
    from fleet.api.event_hints import HintListener
    from fleet.streaming.local import LocalChannel

log = logging.getLogger(__name__)

#: A watched task's poll interval starts here after a change and doubles up to ``POLL_MAX_S``.
POLL_MIN_S, POLL_MAX_S = 0.1, 1.0
#: ... and on to this while change hints come (a safety net for a hint that never came).
POLL_IDLE_S = 10.0
_UNSEEN = ("", -1, -1, -1)


class LoopMarks:
    """``Store.event_marks`` on the loop, on a connection of its own (PostgreSQL): no pool thread
    wakes for an idle poll (one on a thread contended with the loop for the GIL and churned the
    thread's malloc arena: futex, munmap, madvise and page faults under SubmitTask's load)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._statements = AsyncStatements.for_engine(store.engine, size=1)

    @classmethod
    def for_store(cls, store: Store) -> LoopMarks | None:
        """For a store whose marks statement can run so, else None (SQLite: the pool thread)."""
        return cls(store) if store.event_marks_statement([]) is not None else None

    async def __call__(self, task_ids: list[uuid.UUID]) -> dict[uuid.UUID, Mark]:
        statement = self._store.event_marks_statement(task_ids)
        assert statement is not None  # ``for_store`` checked
        return marks_of(await self._statements.all(*statement))

    async def close(self) -> None:
        await self._statements.close()


class DeltaSource(Protocol):
    """Where the hub reads a task's buffered deltas (a stream joining mid-step, or a gap)."""

    async def read(self, task_id: uuid.UUID) -> list[Delta]: ...


class Follower:
    """One stream's wake-ups: its task may have changed (``changed``, from the hub), deltas
    came (``deltas``), or it is to end (``closed``: the client went away, or the server is
    shutting down)."""

    __slots__ = ("_event", "changed", "closed", "deltas")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.changed = True  # the first read
        self.closed = False
        self.deltas: list[Delta] = []

    def notify(self) -> None:
        self.changed = True
        self._event.set()

    def push(self, deltas: list[Delta]) -> None:
        self.deltas.extend(deltas)
        self._event.set()

    def close(self) -> None:
        self.closed = True
        self._event.set()

    async def wait(self, *, until: float | None = None, alarms: Alarms | None = None) -> None:
        """Until notified or closed, or the loop's clock reaches ``until`` (on ``alarms``,
        shared with the followers waiting for the same instant, else a timer of its own)."""
        if not (self.changed or self.closed or self.deltas):
            if until is None:
                await self._event.wait()
            elif alarms is not None:
                alarms.add(until, self._event)
                try:
                    await self._event.wait()
                finally:
                    alarms.discard(until, self._event)
            else:
                timer = asyncio.get_running_loop().call_at(until, self._event.set)
                try:
                    await self._event.wait()
                finally:
                    timer.cancel()
        self._event.clear()


class Alarms:
    """Wake-ups at instants of the loop's clock, one timer handle an instant, however many wait
    for it: the keep-alives of 1,000 idle streams fall on some 16 points of their grid, so the
    loop's timer heap holds about 16 handles for them rather than 1,000. (A request's timers are
    pushed and popped through that heap, each step a comparison in Python: 1,000 far handles in
    it added ~2 µs to a request-like loop iteration in a microbenchmark; in ``bench.events`` the
    change alone could not be told from the noise.)"""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at: dict[float, tuple[asyncio.TimerHandle, set[asyncio.Event]]] = {}

    def __len__(self) -> int:
        """Instants with a timer handle on the loop now."""
        return len(self._at)

    @property
    def waiting(self) -> int:
        """Events waiting for some instant now."""
        return sum(len(events) for _, events in self._at.values())

    def add(self, when: float, event: asyncio.Event) -> None:
        """Set ``event`` once the loop's clock reaches ``when``."""
        entry = self._at.get(when)
        if entry is None:
            handle = asyncio.get_running_loop().call_at(when, self._ring, when)
            entry = self._at[when] = (handle, set())
        entry[1].add(event)

    def discard(self, when: float, event: asyncio.Event) -> None:
        """``event`` no longer waits for ``when`` (the instant's handle goes with its last)."""
        entry = self._at.get(when)
        if entry is None:
            return
        entry[1].discard(event)
        if not entry[1]:
            entry[0].cancel()
            del self._at[when]

    def _ring(self, when: float) -> None:
        _, events = self._at.pop(when, (None, set()))
        for event in events:
            event.set()


@dataclass
class _Watch:
    subscribers: set[Follower] = field(default_factory=set)
    mark: Mark | None = _UNSEEN
    interval: float = POLL_MIN_S
    due: float = 0.0
    #: Its channel's subscription is confirmed (a hint or the confirmation came while live):
    #: every later change will be hinted, so an unchanged read backs off straight to the cap.
    covered: bool = False
    #: A hint came since the read under way was taken (that read may predate its commit).
    hinted: bool = False


def uvicorn_exiting() -> bool:
    """Whether the uvicorn server of this process was told to shut down (its signal handler)."""
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))


class EventHub:
    """Watches tasks for many followers with one store read per poll."""

    def __init__(
        self,
        store: Store,
        *,
        min_s: float = POLL_MIN_S,
        max_s: float = POLL_MAX_S,
        idle_s: float = POLL_IDLE_S,
        hints_url: RedisTarget | str | None = None,
        marks: LoopMarks | None = None,
        exiting: Callable[[], bool] = uvicorn_exiting,
        deltas: DeltaSource | None = None,
        local: LocalChannel | None = None,
    ) -> None:
        self.store = store
        #: Where streams read buffered deltas (None: no token streaming).
        self.deltas: DeltaSource | None = local if local is not None else deltas
        self._local = local
        self._unsubscribe: Callable[[], None] | None = None
        #: How a poll reads the marks: on the loop where the store allows (PostgreSQL), else
        #: ``store.event_marks`` on a pool thread.
        self._marks = marks
        self.min_s, self.max_s, self.idle_s = min_s, max_s, max(idle_s, max_s)
        self._exiting = exiting
        self._watches: dict[uuid.UUID, _Watch] = {}
        #: The followers' keep-alive and deadline wake-ups.
        self.alarms = Alarms()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_poll = float("-inf")
        self.hints: HintListener | None = None
        self._hints_task: asyncio.Task[None] | None = None
        if hints_url:
            from fleet.api.event_hints import HintListener

            self.hints = HintListener(
                hints_url, self._hinted, self._hints_live, on_deltas=self._delta_message
            )
        #: Store reads made (for tests and the benchmark).
        self.polls = 0
        #: Followers now (streams open).
        self.followers = 0
        #: Set once the server shuts down: every stream ends, new ones end at once.
        self.closing = False

    @property
    def watched(self) -> int:
        return len(self._watches)

    @asynccontextmanager
    async def watch(
        self, task_id: uuid.UUID, follower: Follower | None = None
    ) -> AsyncIterator[Follower]:
        """``follower`` (or a new one) notified whenever ``task_id`` may have something new."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="fleet-event-hub")
        if self._local is not None and self._unsubscribe is None:
            loop = asyncio.get_running_loop()

            def delivered(task_id: uuid.UUID, deltas: list[Delta]) -> None:
                with suppress(RuntimeError):  # the loop closed: nobody streams any more
                    loop.call_soon_threadsafe(self._delivered, task_id, deltas)

            self._unsubscribe = self._local.subscribe(delivered)
        if self.hints is not None and (self._hints_task is None or self._hints_task.done()):
            self._hints_task = asyncio.create_task(self.hints.run(), name="fleet-event-hints")
        f = follower if follower is not None else Follower()
        w = self._watches.get(task_id)
        if w is None:
            w = self._watches[task_id] = _Watch()
            if self.hints is not None:
                self.hints.want(task_id)
        w.subscribers.add(f)
        w.interval, w.due = self.min_s, 0.0
        self.followers += 1
        if self.closing:
            f.close()
        self._wake.set()
        try:
            yield f
        finally:
            self.followers -= 1
            w.subscribers.discard(f)
            if not w.subscribers and self._watches.get(task_id) is w:
                del self._watches[task_id]
                if self.hints is not None:
                    self.hints.drop(task_id)

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for task in (self._task, self._hints_task):
            if task is not None:
                task.cancel()
                # (bounded: a task stuck in a Redis close must not hold the server's shutdown)
                await asyncio.wait({task}, timeout=EVENTS_CLOSE_S)
        self._task = self._hints_task = None
        if self._marks is not None:
            await self._marks.close()
        closing = getattr(self.deltas, "close", None)
        if closing is not None and self._local is None:
            await closing()

    @property
    def _cap(self) -> float:
        """How far an idle task's poll interval backs off now."""
        return self.idle_s if self.hints is not None and self.hints.live else self.max_s

    def _hinted(self, task_id: uuid.UUID) -> None:
        """A change hint for ``task_id``: read it at once."""
        w = self._watches.get(task_id)
        if w is not None:
            w.interval, w.due = self.min_s, 0.0
            w.covered = self.hints is not None and self.hints.live
            w.hinted = True
            self._wake.set()

    def _delta_message(self, task_id: uuid.UUID, message: str) -> None:
        """A message of text deltas from the hint subscription."""
        if task_id in self._watches:
            self._delivered(task_id, decode_deltas(message))

    def _delivered(self, task_id: uuid.UUID, deltas: list[Delta]) -> None:
        """New deltas of ``task_id``: to each of its followers."""
        w = self._watches.get(task_id)
        if w is None or not deltas:
            return
        for f in w.subscribers:
            f.push(deltas)

    def _hints_live(self, up: bool) -> None:
        """The hint subscription went down: back to the short clock, every watched task read
        once now. (Coming up, each channel's subscribe confirmation is a hint of its own.)"""
        if up:
            return
        for w in self._watches.values():
            w.interval, w.due = min(w.interval, self.max_s), 0.0
            w.covered = False
        self._wake.set()

    def _close_all(self) -> None:
        self.closing = True
        for w in self._watches.values():
            for f in w.subscribers:
                f.close()

    async def _sleep(self, seconds: float) -> None:
        """Until ``seconds`` pass or a new watch wakes the loop (no task per wait)."""
        timer = asyncio.get_running_loop().call_later(max(0.0, seconds), self._wake.set)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            if not self._watches:
                await self._wake.wait()
                continue
            if not self.closing and self._exiting():
                self._close_all()
            now = loop.time()
            # Hints coming fast (many running tasks) share reads: one every min_s / 2 at most.
            nearest = max(
                min(w.due for w in self._watches.values()), self._last_poll + self.min_s / 2
            )
            if nearest > now:
                await self._sleep(nearest - now)
                continue
            # Those due soon come along: many streams opened at different times share polls.
            due = [tid for tid, w in self._watches.items() if w.due <= now + self.max_s / 2]
            for tid in due:
                self._watches[tid].hinted = False
            self._last_poll = now
            try:
                self.polls += 1
                if self._marks is not None:
                    marks = await self._marks(due)
                else:
                    marks = await run_in_threadpool(self.store.event_marks, due)
            except Exception as exc:  # an outage: followers wait; try again later
                log.warning("task events: reading the store failed: %s", exc)
                for tid in due:
                    if (w := self._watches.get(tid)) is not None:
                        w.due = loop.time() + self.max_s
                continue
            now, cap = loop.time(), self._cap
            for tid in due:
                w = self._watches.get(tid)
                if w is None:
                    continue
                mark = marks.get(tid)  # None: the task is gone (its followers find out)
                if mark != w.mark:
                    w.mark, w.interval = mark, self.min_s
                    for f in w.subscribers:
                        f.notify()
                elif w.hinted:  # a hint came during the read, which may predate its commit
                    w.interval = self.min_s
                elif w.covered:  # unchanged, and every change to come will be hinted
                    w.interval, w.due = cap, idle_due(now, cap)
                    continue
                else:
                    w.interval = min(w.interval * 2, cap)
                w.due = now + w.interval


def idle_due(now: float, idle_s: float) -> float:
    """When an idle task whose changes are hinted is read next: after half of ``idle_s`` to all
    of it, on a grid of ``idle_s / 2`` on the loop's clock, so the idle tasks of a process are
    read together, at most two statements every ``idle_s`` however their streams came."""
    return on_grid(now + idle_s, idle_s / 2)


def on_grid(t: float, step: float) -> float:
    """``t`` rounded down to a multiple of ``step`` (wake-ups that fall on one grid point are
    served by one wake-up of the loop)."""
    return math.floor(t / step) * step
