"""``sigterm_stops`` in this process: SIGTERM and the worker's stop signal, inside and after a
drain (real signals, a stand-in dispatcher)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest

from fleet.dispatch import shutdown


class Dispatcher:
    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.stopped = threading.Event()

    def shut_down(self, grace_s: float) -> int:
        self.stopping.set()
        self.stopped.set()
        return 0


@pytest.fixture
def seen() -> Iterator[list[int]]:
    """The signals that reached the handlers ``sigterm_stops`` replaces."""
    got: list[int] = []
    before = {
        sig: signal.signal(sig, lambda signum, frame: got.append(signum))
        for sig in (signal.SIGTERM, shutdown.STOP_SIGNAL)
    }
    yield got
    for sig, was in before.items():
        signal.signal(sig, was)


@pytest.mark.parametrize("sig", [signal.SIGTERM, shutdown.STOP_SIGNAL])
def test_either_signal_stops_the_drain_gracefully(seen: list[int], sig: int) -> None:
    dispatcher = Dispatcher()
    with shutdown.sigterm_stops(cast(Any, dispatcher), 1.0, lambda n: None):
        os.kill(os.getpid(), sig)
        assert dispatcher.stopped.wait(5)
        assert seen == []  # not the process's own handler while the drain runs


def test_sigterm_takes_its_course_after_the_drain(seen: list[int]) -> None:
    with shutdown.sigterm_stops(cast(Any, Dispatcher()), 1.0, lambda n: None):
        os.kill(os.getpid(), signal.SIGTERM)
    assert seen == [signal.SIGTERM]


def test_the_stop_signal_ends_nothing_after_the_drain(seen: list[int]) -> None:
    """A pool process told to stop goes on to end through its pool, not by the signal."""
    with shutdown.sigterm_stops(cast(Any, Dispatcher()), 1.0, lambda n: None):
        os.kill(os.getpid(), shutdown.STOP_SIGNAL)
    assert seen == []
    assert signal.getsignal(shutdown.STOP_SIGNAL) is not signal.SIG_DFL


@pytest.fixture
def pool_process() -> Iterator[Any]:
    """This process set up as a pool process would be (``pool_exit.start``), undone after."""
    from fleet.dispatch import pool_exit

    class Worker:
        def __init__(self) -> None:
            self.jobs: list[object] = []

        def wait_for_job(self) -> object:
            return self.jobs.pop(0) if self.jobs else None

    before = signal.getsignal(signal.SIGTERM)
    saved = pool_exit.STATE
    pool_exit.STATE = pool_exit._PoolProcess()
    worker = Worker()
    pool_exit.start(worker)
    try:
        yield worker
    finally:
        signal.signal(signal.SIGTERM, before)
        pool_exit.STATE = saved


def test_a_pool_process_leaves_on_sigterm_between_jobs_never_inside_one(pool_process) -> None:
    from fleet.dispatch import pool_exit

    pool_process.jobs.append("job")
    assert pool_process.wait_for_job() == "job"  # a job runs: SIGTERM lets it finish
    os.kill(os.getpid(), signal.SIGTERM)
    assert pool_exit.STATE.leaving
    with pytest.raises(SystemExit) as left:  # ... and the process leaves before the next
        pool_process.wait_for_job()
    assert left.value.code == pool_exit.EX_OK


def test_an_idle_pool_process_leaves_at_once_with_status_0(pool_process) -> None:
    from fleet.dispatch import pool_exit

    def receive() -> object:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while it waits for a job
        return None

    pool_process.wait_for_job = pool_exit._leave_between_jobs(receive)
    with pytest.raises(SystemExit) as left:
        pool_process.wait_for_job()
    assert left.value.code == pool_exit.EX_OK and not pool_exit.STATE.idle


def test_a_pool_process_still_starting_leaves_at_once_with_status_0() -> None:
    """SIGTERM during Celery's process initializer (the runtime being built): no job yet, so
    the process leaves with status 0 instead of dying by the signal (logged as a crash)."""
    from fleet.dispatch import pool_exit

    previous = signal.getsignal(signal.SIGTERM)
    try:
        pool_exit.initializing()
        with pytest.raises(SystemExit) as left:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.5)  # (the handler runs at the next bytecode)
        assert left.value.code == pool_exit.EX_OK
    finally:
        signal.signal(signal.SIGTERM, previous)
