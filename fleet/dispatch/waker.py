"""Wake-ups: hints that a conversation may have work (lost, doubled or early ones are harmless)."""

from __future__ import annotations

import heapq
import threading
import time
import uuid
from datetime import datetime
from typing import Protocol


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
