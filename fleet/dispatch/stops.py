"""Whether this process's runs must stop: one read for all of them.

A run learns of a cancel or an interrupt at its next commit; while it waits inside a step (a
model call streaming, a tool running) it asks ``StopWatch`` instead, through its journal's
``must_stop``. One thread of the process reads the stop requests of every run it holds in one
statement every ``POLL_S`` (started with the first run, idle without one): a cancel reaches the
right run within about ``POLL_S`` however many runs the process holds, for one statement a poll
rather than one a run.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Collection

log = logging.getLogger(__name__)

#: Seconds between reads of the stop requests (what a cancel waits at most before a run hears).
POLL_S = 0.5

#: The ids among those given whose tasks were asked to stop (``Store.stop_requested``).
Read = Callable[[Collection[uuid.UUID]], set[uuid.UUID]]


class StopWatch:
    """The stop requests of the runs this process holds, read together."""

    def __init__(self, read: Read, *, poll_s: float = POLL_S) -> None:
        self._read, self.poll_s = read, poll_s
        self._lock = threading.Lock()
        self._watched: dict[uuid.UUID, threading.Event] = {}
        self._hooks: dict[uuid.UUID, list[Callable[[], None]]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = -1
        #: Reads made (tests).
        self.reads = 0

    def watch(self, task_id: uuid.UUID) -> threading.Event:
        """The event set once ``task_id`` was asked to stop (until ``unwatch``)."""
        with self._lock:
            first = not self._watched
            event = self._watched.setdefault(task_id, threading.Event())
            if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="fleet-stops", daemon=True)
                self._thread.start()
            if first:  # the thread sleeps until a run is watched; else its next poll reads it
                self._wake.set()
            return event

    def unwatch(self, task_id: uuid.UUID) -> None:
        with self._lock:
            self._watched.pop(task_id, None)
            self._hooks.pop(task_id, None)

    def on_stop(self, task_id: uuid.UUID, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` once ``task_id`` is asked to stop (now, if it was already); returns how
        to take it back."""
        with self._lock:
            event = self._watched.get(task_id)
            if event is None or not event.is_set():
                self._hooks.setdefault(task_id, []).append(fn)
                return lambda: self._unhook(task_id, fn)
        fn()
        return lambda: None

    def _unhook(self, task_id: uuid.UUID, fn: Callable[[], None]) -> None:
        with self._lock:
            hooks = self._hooks.get(task_id)
            if hooks is not None and fn in hooks:
                hooks.remove(fn)

    def _run(self) -> None:
        while True:
            with self._lock:
                watched = dict(self._watched)
            if not watched:
                self._wake.clear()
                self._wake.wait()
                continue
            try:
                self.reads += 1
                stop = self._read(list(watched))
            except Exception as exc:  # the store is away: runs go on; their commits decide
                log.debug("reading stop requests failed: %s", exc)
                stop = set()
            for task_id in stop:
                event = watched.get(task_id)
                if event is not None and not event.is_set():
                    event.set()
                    with self._lock:
                        hooks = self._hooks.pop(task_id, [])
                    for fn in hooks:
                        try:
                            fn()
                        except Exception:  # a hang-up that failed: the next chunk stops it
                            log.debug("a stop hook of %s failed", task_id, exc_info=True)
            self._wake.clear()
            self._wake.wait(self.poll_s)
