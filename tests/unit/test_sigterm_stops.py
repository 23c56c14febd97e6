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
