"""The runner's journal port, bound to the store: fenced commits and the stop watch."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from fleet.dispatch.lease import LeaseHandle
from fleet.dispatch.shutdown import HandBack
from fleet.domain import shutdown
from fleet.domain.runs import Signals, TraceRow
from fleet.domain.values import Task
from fleet.errors import LeaseLost, Unavailable
from fleet.store import Store

#: How often a running tool's watch asks the store whether a cancel was requested (seconds).
CANCEL_POLL_S = 0.5


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
    ) -> None:
        self._store = store
        self._task = task
        self._run_id = run_id
        self._handle = handle
        self._clock = clock
        self._previous = previous
        self._stopping = stopping
        self._changed = changed
        self._next_poll = 0.0

    def replay(self) -> Sequence[TraceRow]:
        return self._previous

    def commit(self, rows: Sequence[TraceRow], *, take_inbox_as: int | None = None) -> Signals:
        """Store the finished steps fenced; raises LeaseLost, or HandBack once stored if the
        worker is stopping."""
        if self._handle.lost.is_set():
            raise LeaseLost(f"lease on conversation {self._task.conversation_id} was lost")
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
        """Lease lost, or (asked of the store at most every CANCEL_POLL_S) a cancel requested."""
        if self._handle.lost.is_set():
            return True
        now = time.monotonic()
        if now < self._next_poll:
            return False
        self._next_poll = now + CANCEL_POLL_S
        try:  # a cancel or an interrupt: either stops the tool; the next commit says which
            return self._store.cancel_requested(self._task.id)
        except Unavailable:  # the store is down: let the tool go on; the next commit decides
            return False
