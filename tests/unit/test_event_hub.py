"""The shared poller behind task event streams: one store read for every watched task, only the
changed task's followers woken, idle tasks backing off."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fleet.api.event_hub import EventHub

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


def test_a_task_whose_changes_are_hinted_backs_off_to_the_idle_cap_at_once() -> None:
    """Once its channel's subscription is confirmed (the confirmation is a hint), an unchanged
    read puts the task on the idle clock at once: no doubling from 0.01 s, one read per step."""
    store = FakeStore()
    hub = _hinted_hub(store, idle_s=30.0)

    async def go() -> None:
        async with asyncio.timeout(10), hub.watch(IDS[0]) as f:
            f.changed = False
            await f.wait()  # the first read (the mark was unseen)
            f.changed = False
            hub._hinted(IDS[0])  # the subscription's confirmation
            w = hub._watches[IDS[0]]
            while w.interval < 30.0:
                await asyncio.sleep(0.005)
            # the hinted read, then one more after a change (there was none here: the first
            # read's change put it on the short clock, the hinted read found nothing new)
            assert len(store.reads) <= 3, store.reads
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
            while w.interval < 0.16:
                await asyncio.sleep(0.005)
            assert w.interval == 0.16, "doubling: 0.01, 0.02, 0.04, 0.08, 0.16"
            assert len(store.reads) >= 4
        await hub.close()

    asyncio.run(go())


def test_a_hint_during_a_read_keeps_the_task_on_the_short_clock() -> None:
    """The read under way may predate the hinted commit: unchanged, it is read again soon
    rather than after the idle cap (30 s here)."""
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
            f.changed = False
            await f.wait()
            f.changed = False
            hub._hinted(IDS[0])
            w = hub._watches[IDS[0]]
            while w.interval < 30.0:
                await asyncio.sleep(0.005)
            store.event_marks = hinted_meanwhile  # type: ignore[method-assign]
            hub._hinted(IDS[0])
            reads = len(store.reads)
            while len(store.reads) < reads + 2:  # the hinted read, then one more soon
                await asyncio.sleep(0.005)
            assert not f.changed
        await hub.close()

    asyncio.run(go())


def test_idle_tasks_read_at_different_times_come_together() -> None:
    """An idle task is read up to half its interval early along with another due: streams
    opened at different times end up sharing one read per idle period."""
    store = FakeStore()
    hub = _hinted_hub(store, idle_s=1.0)
    ids = IDS[:3]

    async def go() -> None:
        async with asyncio.timeout(20):
            watches = [hub.watch(t) for t in ids]
            for t, w in zip(ids, watches, strict=True):
                f = await w.__aenter__()
                f.changed = False
                hub._hinted(t)
                await asyncio.sleep(0.15)  # opened 0.15 s apart: due 0.15 s apart
            while any(hub._watches[t].interval < 1.0 for t in ids):
                await asyncio.sleep(0.01)
            seen = len(store.reads)
            while len(store.reads) < seen + 2:
                await asyncio.sleep(0.01)
            assert sorted(store.reads[-1]) == sorted(ids), store.reads[seen:]
            for w in watches:
                await w.__aexit__(None, None, None)
        await hub.close()

    asyncio.run(go())
