"""Graceful shutdown of a worker's runs: finish the step, hand the task back, wake another worker.

``Dispatcher.stopping`` says a shutdown is under way: drains take no new task, and a run's next
journal commit (the step boundary after the step that was running) raises ``HandBack`` once the
finished steps are stored. ``InFlight`` knows the runs a process holds, so ``shut_down`` can wait
for them within the grace period and hand back from outside those that are still mid-step.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Protocol

from fleet.dispatch.host import Stopping, Waking
from fleet.dispatch.lease import Lease, LeaseHandle
from fleet.domain import shutdown
from fleet.domain.shutdown import Where
from fleet.errors import LeaseLost
from fleet.store import Head, Started

log = logging.getLogger(__name__)

#: After the grace period, how long a run that is already settling may still take to commit.
SETTLE_WAIT_S = 2.0


class HandBack(Exception):
    """The worker is stopping: the run's finished steps are stored; give its task back."""


@dataclass(slots=True)
class Running:
    """A run this process works on, the lease it holds for it, and where the run is."""

    started: Started
    handle: LeaseHandle
    where: Where = "step"


class InFlight:
    """The runs of this process, so a shutdown can wait for them (and abandon the late ones)."""

    def __init__(self) -> None:
        self._runs: dict[uuid.UUID, Running] = {}
        self._changed = threading.Condition()
        self._watchers: list[Callable[[int], None]] = []

    def watch(self, told: Callable[[int], None]) -> None:
        """Tell ``told`` how many runs there are now, and again after each change (under the
        lock, so the last count told is the count)."""
        with self._changed:
            self._watchers.append(told)
            told(len(self._runs))

    def _tell(self) -> None:
        for told in self._watchers:
            try:
                told(len(self._runs))
            except Exception:  # a gauge must never stop a run
                log.debug("a watcher of the runs in flight failed", exc_info=True)

    def add(self, started: Started, handle: LeaseHandle) -> None:
        with self._changed:
            self._runs[started.run_id] = Running(started, handle)
            self._tell()

    def settling(self, run_id: uuid.UUID) -> None:
        """The run has its outcome and is storing it (it is not abandoned then)."""
        with self._changed:
            if run_id in self._runs:
                self._runs[run_id].where = "done"

    def count(self) -> int:
        """How many runs this process holds now."""
        with self._changed:
            return len(self._runs)

    def remove(self, run_id: uuid.UUID) -> None:
        with self._changed:
            if self._runs.pop(run_id, None) is not None:
                self._tell()
            self._changed.notify_all()

    def wait_empty(self, timeout_s: float) -> list[Running]:
        """Wait until no run is left or ``timeout_s`` passed; the runs still going then."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._runs and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return list(self._runs.values())

    def __len__(self) -> int:
        with self._changed:
            return len(self._runs)


class StoppingHost(Stopping, Waking, Protocol):
    """What a shutdown uses of the dispatcher."""

    inflight: InFlight
    lease: Lease

    def hand_back(self, started: Started, reason: str) -> Head | None: ...

    def shut_down(self, grace_s: float) -> int: ...


def stop_runs(dispatcher: StoppingHost, grace_s: float) -> int:
    """Stop: runs hand their tasks back after their current step; after ``grace_s`` a run still
    mid-step is abandoned (handed back from here, its lease released, its conversation woken for
    another worker). Returns how many were abandoned."""
    dispatcher.stopping.set()
    if len(dispatcher.inflight):
        # Said once ``stopping`` is set: from this line on no run of this process starts a step.
        log.info("stopping: finishing the current steps, then handing the tasks back")
    abandoned = 0
    for run in dispatcher.inflight.wait_empty(grace_s):
        if shutdown.decide(stopping=True, where=run.where, grace_over=True) != "abandon":
            continue  # settling: its one transaction finishes it (waited for below)
        try:
            dispatcher.hand_back(run.started, shutdown.ABANDONED)
        except LeaseLost:
            continue  # it finished, or was handed back, meanwhile
        run.handle.lost.set()  # its step's watch stops it; its later writes are refused
        dispatcher.lease.release(run.handle)
        dispatcher.wake_next(run.started.task)
        abandoned += 1
    dispatcher.inflight.wait_empty(SETTLE_WAIT_S)
    return abandoned


#: The worker's own "stop gracefully" to its pool processes (``fleet.dispatch.tasks``): unlike
#: SIGTERM it never ends a process, so one whose run had just ended when it arrived goes on to
#: end through its pool (Celery's pool replaces a process that dies while the worker stops, and
#: its terminate relies on SIGTERM still ending an idle process).
STOP_SIGNAL = signal.SIGUSR2


@contextmanager
def sigterm_stops(
    dispatcher: StoppingHost, grace_s: float, on_abandoned: Callable[[int], None]
) -> Iterator[None]:
    """While the block runs (a drain in this process's main thread), SIGTERM (or the worker's
    ``STOP_SIGNAL``) stops gracefully.

    Instead of ending the process at once (a Celery pool process's default), the signal sets
    ``stopping`` and starts ``shut_down`` on a thread: the run hands its task back after its
    current step; if the grace period ends first, ``on_abandoned(count)`` runs (a pool process
    exits there). When the block is over a SIGTERM takes its course: it is raised again for
    the handler it replaced, so the process ends as it would have.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only: the worker's own shutdown hook stops us
        return
    fired = threading.Event()
    terminated = threading.Event()

    def stop() -> None:
        abandoned = dispatcher.shut_down(grace_s)
        if abandoned:
            on_abandoned(abandoned)

    def handler(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGTERM:
            terminated.set()
        if not fired.is_set():
            fired.set()
            threading.Thread(target=stop, name="fleet-shutdown", daemon=True).start()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, STOP_SIGNAL)}
    try:
        yield
    finally:
        for sig, was in previous.items():
            signal.signal(sig, was)
        if terminated.is_set():
            os.kill(os.getpid(), signal.SIGTERM)
