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


class Losses:
    """What a background publisher could not send: counted, and said in the log at most once
    every ``every_s`` (``message`` is formatted with the count and the reason)."""

    def __init__(self, message: str, every_s: float = 60.0) -> None:
        self.message, self.every_s = message, every_s
        self.count = 0
        self._warned = float("-inf")

    def add(self, n: int, why: str) -> None:
        self.count += n
        now = time.monotonic()
        if now - self._warned >= self.every_s:
            self._warned = now
            log.warning(self.message, n, why)


class Hints(Protocol):
    def changed(self, task_id: uuid.UUID) -> None:
        """``task_id``'s status, attempts or journal changed (call after the commit)."""

    def close(self) -> None:
        """Send what is pending (a process about to exit)."""


class NoHints:
    """Embedded mode: nobody subscribes (streams poll the store)."""

    def changed(self, task_id: uuid.UUID) -> None:
        return None

    def close(self) -> None:
        return None


class RedisHints:
    """Publishes hints from a thread of this process (started on first use, again after a fork:
    Celery's prefork children get a thread of their own)."""

    #: Hints sent in one pipeline at most.
    max_batch = 512
    #: Hints waiting at most; beyond, new ones are dropped (the streams' slow reads cover them).
    max_pending = 10_000
    #: Seconds between warnings about lost hints.
    warn_every_s = 60.0

    def __init__(self, client: Any, *, window_s: float = WINDOW_S) -> None:
        self._client = client
        self.window_s = window_s
        self._pid = -1
        self._lock = threading.Lock()
        self._pending: deque[uuid.UUID] = deque()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._losses = Losses(
            "%d change hint(s) for task event streams not sent (%s); streams of those tasks "
            "see their events at their next read (within 10 s)",
            self.warn_every_s,
        )

    def changed(self, task_id: uuid.UUID) -> None:
        if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
            self._start()
        if len(self._pending) >= self.max_pending:
            self._lose(1, "backlog")
            return
        self._pending.append(task_id)
        if not self._ready.is_set():
            self._ready.set()

    def close(self, timeout_s: float = 1.0) -> None:
        """Send what is pending now (no window), then let the thread end."""
        thread = self._thread
        if thread is None or self._pid != os.getpid() or not thread.is_alive():
            return
        self._closing = True
        self._ready.set()
        thread.join(timeout_s)

    def _start(self) -> None:
        with self._lock:
            pid = os.getpid()
            if self._pid == pid and self._thread is not None and self._thread.is_alive():
                return  # another thread started it meanwhile
            if self._pid != pid:  # a forked child: the parent's queue and thread are not ours
                self._pending = deque()
                self._ready = threading.Event()
            self._pid, self._closing = pid, False
            self._thread = threading.Thread(target=self._run, name="fleet-hints", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        pending, ready = self._pending, self._ready
        while True:
            ready.wait()
            if not self._closing:
                time.sleep(self.window_s)  # let hints gather: one wake-up and pipeline for all
            ready.clear()
            while pending:
                batch: set[uuid.UUID] = set()
                while pending and len(batch) < self.max_batch:
                    batch.add(pending.popleft())
                self._send(batch)
            if self._closing:
                return

    def _send(self, batch: set[uuid.UUID]) -> None:
        try:
            pipe = self._client.pipeline(transaction=False)
            for task_id in batch:
                pipe.publish(channel(task_id), b"")
            pipe.execute()
        except Exception as exc:  # hints: the streams' slow reads cover what is lost
            self._lose(len(batch), f"{type(exc).__name__}: {exc}")

    @property
    def lost(self) -> int:
        """Hints dropped (backlog) or not sent (Redis errors), for tests and logs."""
        return self._losses.count

    def _lose(self, n: int, why: str) -> None:
        self._losses.add(n, why)
