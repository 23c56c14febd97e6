"""Embedded mode's loop: serve in-process wake-ups until a task is finished."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

from fleet.dispatch.manager import Dispatcher
from fleet.dispatch.waker import LocalWaker
from fleet.domain.values import Task

#: How long the loop rests when nothing is scheduled (another process holds the conversation).
IDLE_POLL_S = 0.1


def holder_alive(worker: str | None) -> bool:
    """Is the process named ``host:pid`` still running? Unknown hosts count as alive."""
    if not worker:
        return False
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
