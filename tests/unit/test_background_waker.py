"""BackgroundWaker: every hint reaches the inner waker, in order, batched while it is busy."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import datetime

from fleet.dispatch.loop_waker import LoopWaker
from fleet.dispatch.waker import BackgroundWaker, Wake


class Recording:
    """An inner waker whose first batch blocks until the test lets it go."""

    def __init__(self) -> None:
        self.batches: list[list[Wake]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def wake(
        self, conversation_id: uuid.UUID, at: datetime | None = None, *, force: bool = False
    ) -> None:
        self.wake_many([Wake(conversation_id, at, force)])

    def wake_many(self, wakes: list[Wake]) -> None:
        self.batches.append(list(wakes))
        self.entered.set()
        self.release.wait(10)


def test_hints_sent_while_a_batch_is_out_go_together_and_close_sends_the_rest() -> None:
    inner = Recording()
    waker = BackgroundWaker(inner)
    first = uuid.uuid4()
    waker.wake(first)
    assert inner.entered.wait(10)  # the first batch is out (and blocks)
    later = [uuid.uuid4() for _ in range(50)]
    for c in later:
        waker.wake(c, force=True)
    inner.release.set()
    waker.close()
    assert inner.batches == [[Wake(first)], [Wake(c, None, True) for c in later]]


def test_hints_from_many_threads_all_arrive_each_thread_in_order() -> None:
    inner = Recording()
    inner.release.set()
    waker = BackgroundWaker(inner)
    per_thread = {i: [uuid.uuid4() for _ in range(500)] for i in range(4)}

    def produce(ids: list[uuid.UUID]) -> None:
        for c in ids:
            waker.wake(c)

    threads = [threading.Thread(target=produce, args=(ids,)) for ids in per_thread.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    waker.close()
    sent = [c for batch in inner.batches for c, *_ in batch]
    assert sorted(sent) == sorted(c for ids in per_thread.values() for c in ids)
    for ids in per_thread.values():
        mine = set(ids)
        assert [c for c in sent if c in mine] == ids


def test_a_full_backlog_is_sent_inline_not_dropped() -> None:
    inner = Recording()
    waker = BackgroundWaker(inner, max_pending=2)
    waker.wake(uuid.uuid4())
    assert inner.entered.wait(10)  # the thread is busy: the next ones pile up
    queued = [uuid.uuid4(), uuid.uuid4()]
    for c in queued:
        waker.wake(c)
    inner.release.set()  # the inline send below must not block
    inline = uuid.uuid4()
    waker.wake(inline)
    waker.close()
    sent = [c for batch in inner.batches for c, *_ in batch]
    assert sorted(sent[1:]) == sorted([*queued, inline])


class Batches:
    """Stands in for the BackgroundWaker: records each hand-over."""

    def __init__(self) -> None:
        self.calls: list[list[Wake]] = []

    def wake(
        self, conversation_id: uuid.UUID, at: datetime | None = None, *, force: bool = False
    ) -> None:
        self.calls.append([Wake(conversation_id, at, force)])

    def wake_many(self, wakes: list[Wake]) -> None:
        self.calls.append(list(wakes))


def test_without_a_direct_push_a_loop_iteration_s_wake_ups_go_to_the_thread_together() -> None:
    inner = Batches()
    ids = [uuid.uuid4() for _ in range(3)]

    async def main() -> None:
        waker = LoopWaker(inner, asyncio.get_running_loop(), None)  # type: ignore[arg-type]
        for c in ids:
            waker.wake(c)
        assert inner.calls == []  # not yet: after this iteration
        await asyncio.sleep(0)
        waker.wake(ids[0], force=True)
        await asyncio.sleep(0)
        other = threading.Thread(target=waker.wake, args=(ids[1],))
        other.start()
        other.join()

    asyncio.run(main())
    assert inner.calls == [
        [Wake(c) for c in ids],
        [Wake(ids[0], None, True)],
        [Wake(ids[1])],  # from another thread: straight through
    ]
