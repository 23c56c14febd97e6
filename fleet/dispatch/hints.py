"""Change hints: "task X may have a new event", sent on Redis after the store commit.

A ``fleet serve`` that streams a task's events subscribes to its channel
(``fleet.api.event_hints``) and reads the store when a hint comes instead of polling an idle
task every second. A hint is only a hint: the events come from the store, and a lost one (Redis
away, a process killed between its commit and the publish, a writer that sends none) costs
latency, not events — the streaming side still reads every watched task now and then.

Publishing is off the caller's thread (like ``BackgroundWaker``): a step's commit returns at
once. The thread sends what gathered in ``WINDOW_S`` in one pipeline, each task once: a worker
running short tasks fast wakes it about 20 times a second rather than twice a task (woken per
hint, the thread cost fleet 20 % of its dispatch throughput in ``bench.dispatch``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import deque
from typing import Any, Protocol

from fleet.constants import CHANGED_CHANNEL

log = logging.getLogger(__name__)

#: Seconds hints gather before they are sent together (what a hint may add to a stream's delay).
WINDOW_S = 0.05


def channel(task_id: uuid.UUID | str) -> str:
    return CHANGED_CHANNEL.format(task=task_id)


class Hints(Protocol):
    def changed(self, task_id: uuid.UUID) -> None:
        """``task_id``'s status, attempts or journal changed (call after the commit)."""


class NoHints:
    """Embedded mode: nobody subscribes (streams poll the store)."""

    def changed(self, task_id: uuid.UUID) -> None:
        return None


class RedisHints:
    """Publishes hints from a thread of this process (started on first use, again after a fork:
    Celery's prefork children get a thread of their own)."""

    #: Hints sent in one pipeline at most.
    max_batch = 512
    #: Hints waiting at most; beyond, new ones are dropped (the streams' slow reads cover them).
    max_pending = 10_000

    def __init__(self, client: Any, *, window_s: float = WINDOW_S) -> None:
        self._client = client
        self.window_s = window_s
        self._pid = -1
        self._pending: deque[uuid.UUID] = deque()
        self._ready = threading.Event()
        #: Hints dropped (backlog) or not sent (Redis errors), for tests and logs.
        self.lost = 0

    def changed(self, task_id: uuid.UUID) -> None:
        if self._pid != os.getpid():
            self._start()
        if len(self._pending) >= self.max_pending:
            self.lost += 1
            return
        self._pending.append(task_id)
        if not self._ready.is_set():
            self._ready.set()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._pending = deque()
        self._ready = threading.Event()
        threading.Thread(target=self._run, name="fleet-hints", daemon=True).start()

    def _run(self) -> None:
        pending, ready = self._pending, self._ready
        while True:
            ready.wait()
            time.sleep(self.window_s)  # let hints gather: one wake-up and pipeline for them all
            ready.clear()
            while pending:
                batch: set[uuid.UUID] = set()
                while pending and len(batch) < self.max_batch:
                    batch.add(pending.popleft())
                self._send(batch)

    def _send(self, batch: set[uuid.UUID]) -> None:
        try:
            pipe = self._client.pipeline(transaction=False)
            for task_id in batch:
                pipe.publish(channel(task_id), b"")
            pipe.execute()
        except Exception as exc:  # hints: the streams' slow reads cover what is lost
            self.lost += len(batch)
            log.debug("%d change hint(s) not sent: %s", len(batch), exc)
