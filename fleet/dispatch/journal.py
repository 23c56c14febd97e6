"""The runner's journal port, bound to the store: fenced commits and the stop watch."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from fleet.dispatch.lease import LeaseHandle
from fleet.dispatch.shutdown import HandBack
from fleet.domain import journal, shutdown
from fleet.domain.runs import Signals, TraceRow
from fleet.domain.values import Task
from fleet.errors import LeaseLost
from fleet.store import Store


class StoreJournal:
    """Commits a run's steps to the store under its task's fencing number."""

    def __init__(
        self,
        store: Store,
        task: Task,
        run_id: uuid.UUID,
        handle: LeaseHandle,
        clock: Callable[[], datetime],
        *,
        previous: Sequence[TraceRow] = (),
        stopping: Callable[[], bool] = lambda: False,
        changed: Callable[[uuid.UUID], None] = lambda task_id: None,
        stop: threading.Event | None = None,
    ) -> None:
        self._store = store
        self._task = task
        self._run_id = run_id
        self._handle = handle
        self._clock = clock
        self._previous = previous
        self._stopping = stopping
        self._changed = changed
        #: Set by the process's ``StopWatch`` once the task was asked to stop.
        self._stop = stop or threading.Event()

    def replay(self) -> Sequence[TraceRow]:
        return self._previous

    def commit(self, rows: Sequence[TraceRow], *, take_inbox_as: int | None = None) -> Signals:
        """Store the finished steps fenced; raises LeaseLost, or HandBack once stored if the
        worker is stopping."""
        if self._handle.lost.is_set():
            raise LeaseLost(f"lease on conversation {self._task.conversation_id} was lost")
        if self._stopping():
            # It hands back at this commit: an unsafe call these rows mark as begun will not
            # begin. (A stop that comes during the commit leaves the mark: a resume reads the
            # mark of a run handed back at a step boundary as never begun too.)
            rows = journal.never_begun(rows)
        signals = self._store.checkpoint(
            self._task, self._run_id, rows, self._clock(), take_inbox_as=take_inbox_as
        )
        self._changed(self._task.id)  # committed: a stream of this task reads it now
        # What finished is stored now: a worker that is stopping gives the task back here.
        action = shutdown.decide(stopping=self._stopping(), where="boundary", cancel=signals.cancel)
        if action == "hand_back":
            raise HandBack(f"task {self._task.id}: handed back at step boundary")
        return signals

    def must_stop(self) -> bool:
        """Lease lost, or a cancel or an interrupt requested (the process's ``StopWatch`` reads
        them for all its runs); the next commit says which."""
        return self._handle.lost.is_set() or self._stop.is_set()
