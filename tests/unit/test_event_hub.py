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
