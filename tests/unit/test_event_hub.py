"""The shared poller behind task event streams: one store read for every watched task, only the
changed task's followers woken, idle tasks backing off."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import SimpleNamespace
from typing import Any

import pytest

from fleet.api.event_hub import Alarms, EventHub, Follower, idle_due
from fleet.api.event_stream import updates
from fleet.domain.deltas import Delta
from fleet.domain.events import Position, TaskEvent

IDS = [uuid.UUID(int=i) for i in range(1, 51)]


class FakeStore:
    def __init__(self) -> None:
        self.marks: dict[uuid.UUID, tuple[str, int, int, int]] = {
            t: ("queued", 0, 0, 0) for t in IDS
        }
        self.reads: list[list[uuid.UUID]] = []

    def event_marks(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
        self.reads.append(list(ids))
        return {t: self.marks[t] for t in ids if t in self.marks}


def test_one_read_serves_every_watch_and_only_changes_wake() -> None:
    store = FakeStore()
    hub = EventHub(store, min_s=0.01, max_s=0.04)  # type: ignore[arg-type]

    async def go() -> None:
        async with asyncio.timeout(10):
            watches = [hub.watch(t) for t in IDS]
            events = [await w.__aenter__() for w in watches]
            for e in events:
                e.changed = False  # as if each had made its first read
            # the first poll reports every task once (a follower then reads its events)
            await asyncio.gather(*(e.wait() for e in events))
            assert all(e.changed for e in events)
            assert store.reads[0] == IDS, "one read for all fifty"
            for e in events:
                e.changed = False
            while hub._watches[IDS[0]].interval < 0.04:  # idle: backs off to the maximum
                await asyncio.sleep(0.01)
            assert all(w.interval == 0.04 for w in hub._watches.values())
            assert not any(e.changed for e in events)
            assert store.reads[-1] == IDS, "idle ones are still read together"

            store.marks[IDS[3]] = ("running", 1, 0, 0)
            await events[3].wait()
            assert [i for i, e in enumerate(events) if e.changed] == [3]
            assert hub._watches[IDS[3]].interval < 0.04, "a change polls it sooner again"

            del store.marks[IDS[5]]  # the task is gone: its followers look and find out
            await events[5].wait()
            for w in watches:
                await w.__aexit__(None, None, None)
            assert hub.watched == 0
            await hub.close()

    asyncio.run(go())


def test_two_followers_of_one_task_share_its_watch() -> None:
    store = FakeStore()
    hub = EventHub(store, min_s=0.01, max_s=0.02)  # type: ignore[arg-type]

    async def go() -> None:
        async with hub.watch(IDS[0]) as a, hub.watch(IDS[0]) as b:
            assert hub.watched == 1
            a.changed = b.changed = False
            await asyncio.wait_for(asyncio.gather(a.wait(), b.wait()), 5)
        assert hub.watched == 0
        await hub.close()

    asyncio.run(go())


class LiveHints:
    """What the hub needs of a hint listener, always live (the hub's tests drive ``_hinted``)."""

    live = True
    hints = 0

    def want(self, task_id: uuid.UUID) -> None:
        pass

    def drop(self, task_id: uuid.UUID) -> None:
        pass

    async def run(self) -> None:
        await asyncio.Event().wait()


def _hinted_hub(store: FakeStore, idle_s: float) -> EventHub:
    hub = EventHub(store, min_s=0.01, max_s=0.04, idle_s=idle_s)  # type: ignore[arg-type]
    hub.hints = LiveHints()  # type: ignore[assignment]
    return hub


async def _until(condition: Callable[[], bool], within: float = 5.0) -> bool:
    """Whether ``condition()`` came true within ``within`` seconds (polled every 5 ms)."""
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


async def _confirmed(hub: EventHub, f: Follower, task: uuid.UUID) -> None:
    """The watch's first read done, then its channel's subscription confirmed (a hint)."""
    f.changed = False
    await f.wait()
    f.changed = False
    hub._hinted(task)
    assert hub._watches[task].interval == hub.min_s


def test_a_task_whose_changes_are_hinted_backs_off_to_the_idle_cap_at_once() -> None:
    """Once its channel's subscription is confirmed (the confirmation is a hint), a read that
    finds nothing new puts the task on the idle clock at once, not on 0.02 s doubling up."""
    store = FakeStore()
    hub = _hinted_hub(store, idle_s=30.0)

    async def go() -> None:
        async with asyncio.timeout(10), hub.watch(IDS[0]) as f:
            await _confirmed(hub, f, IDS[0])
            w = hub._watches[IDS[0]]
            assert await _until(lambda: w.interval != hub.min_s), "the hinted read came"
            assert w.interval == 30.0, "straight to the idle cap"
            assert not f.changed
        await hub.close()

    asyncio.run(go())


def test_without_a_confirmed_subscription_a_task_still_backs_off_step_by_step() -> None:
    store = FakeStore()
    hub = _hinted_hub(store, idle_s=30.0)

    async def go() -> None:
        async with asyncio.timeout(10), hub.watch(IDS[0]) as f:
            f.changed = False
            await f.wait()
            w = hub._watches[IDS[0]]
            assert await _until(lambda: w.interval >= 0.16)
            assert w.interval == 0.16, "doubling: 0.01, 0.02, 0.04, 0.08, 0.16"
            assert len(store.reads) >= 4
        await hub.close()

    asyncio.run(go())


def test_losing_the_subscription_uncovers_every_task() -> None:
    """Hints down: every task back on the short clock and no longer covered, so it backs off
    step by step (up to max_s) until its channel's confirmation comes again."""
    store = FakeStore()
    hub = _hinted_hub(store, idle_s=30.0)

    async def go() -> None:
        async with asyncio.timeout(10), hub.watch(IDS[0]) as f:
            await _confirmed(hub, f, IDS[0])
            w = hub._watches[IDS[0]]
            assert await _until(lambda: w.interval == 30.0)
            hub.hints.live = False  # type: ignore[union-attr]
            hub._hints_live(False)
            assert not w.covered and w.interval <= hub.max_s and w.due == 0.0
            assert await _until(lambda: w.interval == hub.max_s), "backs off to max_s"
        async with hub.watch(IDS[0]):
            assert not hub._watches[IDS[0]].covered, "a new watch waits for its confirmation"
        await hub.close()

    asyncio.run(go())


def test_a_hint_during_a_read_keeps_the_task_on_the_short_clock() -> None:
    """The read under way may predate the hinted commit: unchanged, it is read again soon
    rather than after the idle cap (15-30 s here)."""
    store = FakeStore()
    hub = _hinted_hub(store, idle_s=30.0)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        inner = store.event_marks

        def hinted_meanwhile(ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
            marks = inner(ids)
            store.event_marks = inner  # type: ignore[method-assign]
            loop.call_soon_threadsafe(hub._hinted, IDS[0])  # before this read's answer
            return marks

        async with asyncio.timeout(10), hub.watch(IDS[0]) as f:
            await _confirmed(hub, f, IDS[0])
            w = hub._watches[IDS[0]]
            assert await _until(lambda: w.interval == 30.0)
            store.event_marks = hinted_meanwhile  # type: ignore[method-assign]
            reads = len(store.reads)
            hub._hinted(IDS[0])
            # the hinted read, then one more soon (not 15-30 s later)
            assert await _until(lambda: len(store.reads) >= reads + 2, within=3.0), store.reads
            assert not f.changed
        await hub.close()

    asyncio.run(go())


@pytest.mark.parametrize("idle_s", [10.0, 1.0])
@pytest.mark.parametrize("now", [0.0, 3.3, 4.99, 5.0, 12345.678])
def test_an_idle_read_falls_on_a_grid_of_half_the_idle_interval(idle_s: float, now: float) -> None:
    due = idle_due(now, idle_s)
    assert now + idle_s / 2 < due <= now + idle_s
    assert abs(due / (idle_s / 2) - round(due / (idle_s / 2))) < 1e-9


def test_idle_tasks_watched_since_different_times_are_read_together() -> None:
    """Tasks whose streams opened at different times end up due at the same instants: at most
    two reads every idle period for all of them, whenever each came."""
    store = FakeStore()
    hub = _hinted_hub(store, idle_s=1.0)
    ids = IDS[:5]

    async def go() -> None:
        async with asyncio.timeout(20), AsyncExitStack() as stack:
            for t in ids:
                f = await stack.enter_async_context(hub.watch(t))
                await _confirmed(hub, f, t)
                await asyncio.sleep(0.13)  # the next one opens later (any spacing will do)
            assert await _until(lambda: all(hub._watches[t].interval == 1.0 for t in ids))
            dues = {hub._watches[t].due for t in ids}
            assert len(dues) <= 2, dues
            assert all(abs(d / 0.5 - round(d / 0.5)) < 1e-9 for d in dues), dues
        await hub.close()

    asyncio.run(go())


def test_alarms_share_one_handle_an_instant_and_ring_every_waiter() -> None:
    """Waiters for one instant share its timer handle; the last to leave cancels it; ringing
    sets every waiter still there and forgets the instant."""

    async def go() -> None:
        loop = asyncio.get_running_loop()
        alarms = Alarms()
        a, b, c = asyncio.Event(), asyncio.Event(), asyncio.Event()
        soon, later = loop.time() + 0.05, loop.time() + 60.0
        alarms.add(soon, a)
        alarms.add(soon, b)
        alarms.add(later, c)
        assert len(alarms) == 2
        alarms.discard(later, c)  # its last waiter gone: the handle goes too
        assert len(alarms) == 1
        alarms.discard(later, c)  # twice is harmless
        alarms.discard(soon, a)
        async with asyncio.timeout(5):
            await b.wait()
        assert not a.is_set() and not c.is_set() and len(alarms) == 0
        alarms.discard(soon, b)  # after the ring: nothing left to drop
        assert len(alarms) == 0

    asyncio.run(go())


class EventStore(FakeStore):
    """Marks that never change, and a running task's events as the test stores them."""

    def __init__(self) -> None:
        super().__init__()
        self.task = SimpleNamespace(status=SimpleNamespace(terminal=False))
        self.events: list[TaskEvent] = [
            TaskEvent(Position(0, 0), "status", self.task),  # type: ignore[arg-type]
            TaskEvent(Position(1, 0), "status", self.task),  # type: ignore[arg-type]
        ]

    def task_events(self, task_id: uuid.UUID, after: Position | None) -> tuple[Any, list[Any]]:
        return self.task, [e for e in self.events if after is None or e.position > after]


class Buffer:
    def __init__(self) -> None:
        self.deltas: list[Delta] = []
        self.reads = 0

    async def read(self, task_id: uuid.UUID) -> list[Delta]:
        self.reads += 1
        return list(self.deltas)


def test_a_steps_first_delta_needs_no_read_and_its_last_goes_before_its_event() -> None:
    store, buffer = EventStore(), Buffer()
    hub = EventHub(store, min_s=0.01, max_s=0.04, deltas=buffer)  # type: ignore[arg-type]
    task = IDS[0]

    def delta(seq: int) -> Delta:
        return Delta(Position.delta(1, 1, seq), "run", f"t{seq} ")

    async def go() -> None:
        async with asyncio.timeout(10):
            stream = updates(hub, task, None, follower=Follower())
            assert [(await anext(stream)).id for _ in range(2)] == ["0.0.0", "1.0.0"]  # type: ignore[union-attr]
            assert await _until(lambda: bool(store.reads)), "the hub's first poll"
            reads = buffer.reads
            buffer.deltas.append(delta(1))
            hub._delivered(task, [delta(1)])
            assert (await anext(stream)).id == "1.1.d1"  # type: ignore[union-attr]
            assert buffer.reads == reads, "right after the run's start: sent without a read"
            # the step's last text and its journaled event come together
            buffer.deltas.append(delta(2))
            store.events.append(TaskEvent(Position(1, 1), "step", store.task))  # type: ignore[arg-type]
            hub._delivered(task, [delta(2)])
            for w in hub._watches[task].subscribers:
                w.notify()
            got = [(await anext(stream)).id for _ in range(2)]  # type: ignore[union-attr]
            assert got == ["1.1.d2", "1.1.0"], "the text before its step's event, not dropped"
            await stream.aclose()
        await hub.close()

    asyncio.run(go())
