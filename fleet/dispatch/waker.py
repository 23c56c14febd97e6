"""Wake-ups: hints that a conversation may have work (lost, doubled or early ones are harmless)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from fleet.constants import DEFAULT_PRIORITY, DEFAULT_TENANT
from fleet.domain.fairness import FairQueue, Turn

log = logging.getLogger(__name__)


class Wake(NamedTuple):
    """One wake-up: which conversation, from when, and whose turn (tenant, priority) it is."""

    conversation_id: uuid.UUID
    at: datetime | None = None
    #: Skip de-duplication (the sweeper's, a drain handing its conversation on).
    force: bool = False
    tenant: str = DEFAULT_TENANT
    priority: int = DEFAULT_PRIORITY


class Waker(Protocol):
    def wake(
        self,
        conversation_id: uuid.UUID,
        at: datetime | None = None,
        *,
        force: bool = False,
        tenant: str = DEFAULT_TENANT,
        priority: int = DEFAULT_PRIORITY,
    ) -> None:
        """Ask for a drain of the conversation not before ``at``, as a turn of ``tenant``
        (``fleet.domain.fairness``); ``force`` skips de-duplication."""


class WakeBatches:
    """A waker whose ``wake`` is a batch of one for its ``wake_many``."""

    def wake(
        self,
        conversation_id: uuid.UUID,
        at: datetime | None = None,
        *,
        force: bool = False,
        tenant: str = DEFAULT_TENANT,
        priority: int = DEFAULT_PRIORITY,
    ) -> None:
        self.wake_many([Wake(conversation_id, at, force, tenant, priority)])

    def wake_many(self, wakes: Sequence[Wake]) -> None:
        raise NotImplementedError


class LocalWaker(WakeBatches):
    """In-process wake-ups for embedded mode: a heap of delayed ones by due time, and the due
    ones in a fair queue (``fleet.domain.fairness``) that ``pop_due`` takes turns from."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, Turn]] = []
        self._n = 0
        self._due = FairQueue()
        #: Set by every wake-up, so a loop waiting for work notices it at once.
        self.changed = threading.Event()

    def configure(self, weights: Mapping[str, int], caps: Mapping[str, int | None]) -> None:
        with self._lock:
            self._due.configure(weights, caps)

    def wake_many(self, wakes: Sequence[Wake]) -> None:
        with self._lock:
            for w in wakes:
                turn = Turn(w.conversation_id, w.tenant, w.priority)
                if w.at is None or w.at.timestamp() <= time.time():
                    self._due.add(turn)
                else:
                    self._n += 1
                    heapq.heappush(self._heap, (w.at.timestamp(), self._n, turn))
        self.changed.set()

    def pop_due(self, now: datetime) -> Turn | None:
        """The next turn (fairly across tenants) among the due conversations; ``done`` ends it."""
        with self._lock:
            while self._heap and self._heap[0][0] <= now.timestamp():
                self._due.add(heapq.heappop(self._heap)[2])
            return self._due.pick()

    def done(self, conversation_id: uuid.UUID) -> None:
        """A turn's drain returned: its tenant has room again (``max_running``)."""
        with self._lock:
            self._due.done(conversation_id)
        self.changed.set()

    def next_due(self) -> float | None:
        """Epoch seconds of the earliest pending wake-up (0 when a turn can be taken now; due
        work of a tenant at its ``max_running`` waits for a ``done``, which sets ``changed``)."""
        with self._lock:
            if self._due.pickable():
                return 0.0
            return self._heap[0][0] if self._heap else None


class BackgroundWaker(WakeBatches):
    """Sends another waker's wake-ups from a thread, so a request returns right after its commit.

    For ``fleet serve``: publishing a Celery message costs about as much as the admission itself.
    A hint still queued here when the process dies is covered by the sweeper, like any lost one.
    A wake-up is an append; the thread is signalled only when it waits for work, so under load a
    batch costs one signal rather than one per request.
    """

    #: Wake-ups sent in one go at most.
    max_batch = 256

    def __init__(self, inner: Waker, *, max_pending: int = 10_000) -> None:
        self._inner = inner
        self._max_pending = max_pending
        self._pending: deque[Wake | None] = deque()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-waker", daemon=True)
        self._thread.start()

    def wake_many(self, wakes: Sequence[Wake]) -> None:
        """Wake-ups to send (one signal to the thread at most); a backlog of hints is sent
        inline rather than dropped."""
        if len(self._pending) + len(wakes) > self._max_pending:
            self._send(list(wakes))
            return
        self._pending.extend(wakes)
        # Appended before the check: if the thread has not cleared the flag yet, its next
        # drain (after the clear) takes these too.
        if not self._ready.is_set():
            self._ready.set()

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued, then stop."""
        self._pending.append(None)
        self._ready.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        stop = False
        while not stop:
            self._ready.wait()
            self._ready.clear()
            # What piled up while the last batch was sent goes out together (one round trip).
            while self._pending and not stop:
                batch: list[Wake | None] = []
                while self._pending and len(batch) < self.max_batch:
                    batch.append(self._pending.popleft())
                stop = None in batch
                self._send([item for item in batch if item is not None])

    def _send(self, wakes: list[Wake]) -> None:
        try:
            wake_many = getattr(self._inner, "wake_many", None)
            if wake_many is not None:
                wake_many(wakes)
            else:
                for w in wakes:
                    self._inner.wake(
                        w.conversation_id, w.at, force=w.force, tenant=w.tenant, priority=w.priority
                    )
        except Exception:  # hints; the sweeper re-sends what is lost
            log.warning("%d wake-up(s) not sent", len(wakes), exc_info=True)
