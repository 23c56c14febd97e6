"""In-process lease (embedded mode, unit tests): a dict guarded by a lock, with expiry."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence

from fleet.dispatch.lease import Lease, LeaseHandle


class LocalLease(Lease):
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ttl_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[uuid.UUID, tuple[str, float]] = {}
        self._knocked: set[uuid.UUID] = set()

    def _live(self, conversation_id: uuid.UUID) -> tuple[str, float] | None:
        entry = self._held.get(conversation_id)
        if entry is not None and entry[1] <= self._clock():
            del self._held[conversation_id]
            return None
        return entry

    def acquire(self, conversation_id: uuid.UUID) -> LeaseHandle | None:
        with self._lock:
            if self._live(conversation_id) is not None:
                self._knocked.add(conversation_id)
                return None
            token = self.new_token()
            self._held[conversation_id] = (token, self._clock() + self.ttl_s)
            return LeaseHandle(conversation_id, token)

    def renew(self, handle: LeaseHandle) -> bool:
        with self._lock:
            entry = self._live(handle.conversation_id)
            if entry is None or entry[0] != handle.token:
                return False
            self._held[handle.conversation_id] = (handle.token, self._clock() + self.ttl_s)
            return True

    def release(self, handle: LeaseHandle) -> bool:
        with self._lock:
            entry = self._live(handle.conversation_id)
            if entry is None or entry[0] != handle.token:
                return False
            del self._held[handle.conversation_id]
            if handle.conversation_id in self._knocked:
                self._knocked.discard(handle.conversation_id)
                return True
            return False

    def held(self, conversation_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        with self._lock:
            return {c for c in conversation_ids if self._live(c) is not None}
