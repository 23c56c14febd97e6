"""Embedded mode's loop: serve in-process wake-ups until a task is finished."""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid

from fleet.dispatch.manager import Dispatcher
from fleet.dispatch.pids import pid_alive
from fleet.dispatch.waker import LocalWaker
from fleet.domain.values import Task

log = logging.getLogger(__name__)

#: How long the loop rests when nothing is scheduled (another process holds the conversation).
IDLE_POLL_S = 0.1


def holder_alive(worker: str | None) -> bool:
    """Is the process named ``host:pid`` still running? Unknown hosts count as alive."""
    if not worker:
        return False
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    return pid_alive(int(pid))


def run_until_done(
    dispatcher: Dispatcher, waker: LocalWaker, task_id: uuid.UUID, timeout_s: float
) -> Task:
    """Drain woken conversations in this process until ``task_id`` is terminal or time is up.

    Runs first recover what an earlier process left running when it died (its pid is gone).
    """
    dispatcher.sweep(alive=holder_alive)
    deadline = time.monotonic() + timeout_s
    rest = threading.Event()
    while True:
        task = dispatcher.store.get_task(task_id)
        if task.status.terminal or time.monotonic() >= deadline:
            return task
        conversation = waker.pop_due(dispatcher.clock())
        if conversation is not None:
            dispatcher.drain(conversation)
            continue
        due = waker.next_due()
        if due is None:
            dispatcher.sweep(alive=holder_alive)
            if waker.next_due() is None:
                rest.wait(IDLE_POLL_S)
            continue
        rest.wait(max(0.0, min(due - time.time(), deadline - time.monotonic())))


class EmbeddedLoop:
    """A background thread that runs woken conversations in this process (embedded ``serve``).

    It also sweeps every ``sweep_interval``, so work left by a crashed process or admitted by
    another process on the same SQLite file is started too.
    """

    def __init__(self, dispatcher: Dispatcher, waker: LocalWaker) -> None:
        self._dispatcher = dispatcher
        self._waker = waker
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-embedded", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._dispatcher.stopping.set()
        self._waker.changed.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        interval = self._dispatcher.settings.sweep_interval
        next_sweep = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_sweep:
                    self._dispatcher.sweep(alive=holder_alive)
                    next_sweep = time.monotonic() + interval
                conversation = self._waker.pop_due(self._dispatcher.clock())
                if conversation is not None:
                    self._dispatcher.drain(conversation)
                    continue
            except Exception:  # keep serving; the sweeper retries what failed
                log.exception("embedded loop: drain failed")
            self._waker.changed.clear()
            due = self._waker.next_due()
            wait = next_sweep - time.monotonic()
            if due is not None:
                wait = min(wait, due - time.time())
            self._waker.changed.wait(max(0.0, wait))
