"""Wake-ups: hints that a conversation may have work (lost, doubled or early ones are harmless)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections import deque
from datetime import datetime
from typing import Protocol

log = logging.getLogger(__name__)


class Waker(Protocol):
    def wake(
        self, conversation_id: uuid.UUID, at: datetime | None = None, *, force: bool = False
    ) -> None:
        """Ask for a drain of the conversation not before ``at``; ``force`` skips de-duplication."""


class LocalWaker:
    """In-process wake-ups for embedded mode: a heap ordered by due time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, uuid.UUID]] = []
        self._n = 0
        #: Conversations with an immediate wake-up pending (a second one would find nothing).
        self._pending: set[uuid.UUID] = set()
        #: Set by every wake-up, so a loop waiting for work notices it at once.
        self.changed = threading.Event()

    def wake(
        self, conversation_id: uuid.UUID, at: datetime | None = None, *, force: bool = False
    ) -> None:
        with self._lock:
            if at is None or at.timestamp() <= time.time():
                if conversation_id in self._pending and not force:
                    return
                self._pending.add(conversation_id)
                at = None
            self._n += 1
            heapq.heappush(self._heap, (at.timestamp() if at else 0.0, self._n, conversation_id))
        self.changed.set()

    def pop_due(self, now: datetime) -> uuid.UUID | None:
        with self._lock:
            if self._heap and self._heap[0][0] <= now.timestamp():
                conversation = heapq.heappop(self._heap)[2]
                self._pending.discard(conversation)
                return conversation
            return None

    def next_due(self) -> float | None:
        """Epoch seconds of the earliest pending wake-up."""
        with self._lock:
            return self._heap[0][0] if self._heap else None


class BackgroundWaker:
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
        self._pending: deque[tuple[uuid.UUID, datetime | None, bool] | None] = deque()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-waker", daemon=True)
        self._thread.start()

    def wake(
        self, conversation_id: uuid.UUID, at: datetime | None = None, *, force: bool = False
    ) -> None:
        if len(self._pending) >= self._max_pending:
            # a backlog of hints: send this one inline rather than drop it
            self._inner.wake(conversation_id, at, force=force)
            return
        self._pending.append((conversation_id, at, force))
        # Appended before the check: if the thread has not cleared the flag yet, its next
        # drain (after the clear) takes this one too.
        if not self._ready.is_set():
            self._ready.set()

    def wake_all(self, wakes: list[tuple[uuid.UUID, datetime | None, bool]]) -> None:
        """Several wake-ups at once (one signal to the thread at most)."""
        if len(self._pending) + len(wakes) > self._max_pending:
            for conversation_id, at, force in wakes:
                self.wake(conversation_id, at, force=force)
            return
        self._pending.extend(wakes)
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
                batch: list[tuple[uuid.UUID, datetime | None, bool] | None] = []
                while self._pending and len(batch) < self.max_batch:
                    batch.append(self._pending.popleft())
                stop = None in batch
                self._send([item for item in batch if item is not None])

    def _send(self, wakes: list[tuple[uuid.UUID, datetime | None, bool]]) -> None:
        try:
            wake_many = getattr(self._inner, "wake_many", None)
            if wake_many is not None:
                wake_many(wakes)
            else:
                for conversation_id, at, force in wakes:
                    self._inner.wake(conversation_id, at, force=force)
        except Exception:  # hints; the sweeper re-sends what is lost
            log.warning("%d wake-up(s) not sent", len(wakes), exc_info=True)
