"""The stop watch: one read for the stop requests of every run a process holds."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection

from fleet.dispatch.stops import StopWatch


class Requests:
    def __init__(self) -> None:
        self.stop: set[uuid.UUID] = set()
        self.asked: list[list[uuid.UUID]] = []
        self.read = threading.Event()

    def __call__(self, ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
        self.asked.append(list(ids))
        self.read.set()
        return self.stop & set(ids)


def test_one_read_covers_every_run_and_only_the_asked_one_stops() -> None:
    requests = Requests()
    watch = StopWatch(requests, poll_s=0.01)
    ids = [uuid.uuid4() for _ in range(300)]
    events = [watch.watch(i) for i in ids]
    requests.stop.add(ids[123])
    assert events[123].wait(5), "the asked run hears of it"
    assert not any(e.is_set() for n, e in enumerate(events) if n != 123)
    assert any(len(a) == 300 for a in requests.asked), "every run in one read"


def test_an_idle_watch_reads_nothing() -> None:
    requests = Requests()
    watch = StopWatch(requests, poll_s=0.01)
    task = uuid.uuid4()
    watch.watch(task)
    assert requests.read.wait(5)
    watch.unwatch(task)
    requests.asked.clear()
    requests.read.clear()
    assert not requests.read.wait(0.2), "no run held: no reads"


def test_a_failing_read_leaves_the_runs_going() -> None:
    calls: list[int] = []
    done = threading.Event()

    def broken(ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
        calls.append(len(ids))
        if len(calls) >= 3:
            done.set()
        raise OSError("store away")

    watch = StopWatch(broken, poll_s=0.01)
    event = watch.watch(uuid.uuid4())
    assert done.wait(5), "it goes on reading"
    assert not event.is_set()


def test_runs_that_start_while_others_are_watched_wait_for_the_next_poll() -> None:
    """Hundreds of runs starting at once cost a read a poll, not a read a run."""
    requests = Requests()
    watch = StopWatch(requests, poll_s=60)
    watch.watch(uuid.uuid4())
    assert requests.read.wait(5), "the first run wakes the watch: one read"
    for _ in range(300):
        watch.watch(uuid.uuid4())
    assert len(requests.asked) == 1, "the others are read at the next poll"
