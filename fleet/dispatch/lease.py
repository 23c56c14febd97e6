"""The conversation lease port: who may work a conversation now (Redis or in-process).

A lease keeps workers from contending; it is not mutual exclusion on its own (a stalled holder
can outlive it), which is why every write of a run is also fenced in the store.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class LeaseHandle:
    """A held lease: its conversation, its token, and whether renewal failed since."""

    conversation_id: uuid.UUID
    token: str
    lost: threading.Event = field(default_factory=threading.Event)


class Lease(ABC):
    """Per-conversation lease with a time-to-live, renewed by a heartbeat while a run works."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._beating: dict[int, tuple[LeaseHandle, float]] = {}
        self._beat_lock = threading.Lock()
        self._beat_wake = threading.Condition(self._beat_lock)
        self._beat_thread: threading.Thread | None = None

    @abstractmethod
    def acquire(self, conversation_id: uuid.UUID) -> LeaseHandle | None:
        """Take the lease if nobody holds it; else leave a knock for the holder and return None.

        The knock is how a wake-up that found the conversation busy reaches its holder: the
        holder's ``release`` reports it, and the holder looks at the conversation again.
        """

    @abstractmethod
    def renew(self, handle: LeaseHandle) -> bool:
        """Extend the lease by its TTL; False if it expired or another holder took it."""

    def renew_many(self, handles: Sequence[LeaseHandle]) -> list[bool]:
        """``renew`` for each (in order); a lease port may do it in one round trip."""
        return [self.renew(h) for h in handles]

    @abstractmethod
    def release(self, handle: LeaseHandle) -> bool:
        """Give the lease up if still ours; True if somebody knocked while we held it."""

    @abstractmethod
    def held(self, conversation_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these conversations have a live lease right now."""

    @staticmethod
    def new_token() -> str:
        return uuid.uuid4().hex

    @contextmanager
    def kept_alive(self, handle: LeaseHandle) -> Iterator[LeaseHandle]:
        """Renew every TTL/3 until the block ends; a failed renewal sets ``handle.lost``.

        One heartbeat thread per process serves every held lease (no thread per run).
        """
        with self._beat_lock:
            first = not self._beating
            self._beating[id(handle)] = (handle, time.monotonic() + self.ttl_s / 3)
            if self._beat_thread is None or not self._beat_thread.is_alive():
                self._beat_thread = threading.Thread(
                    target=self._beat, name="fleet-lease-heartbeat", daemon=True
                )
                self._beat_thread.start()
            if first:  # else the thread wakes for an earlier lease before this one is due
                self._beat_wake.notify()
        try:
            yield handle
        finally:
            with self._beat_lock:
                self._beating.pop(id(handle), None)

    def _beat(self) -> None:
        while True:
            with self._beat_lock:
                now = time.monotonic()
                # due now, or within a sixth of the TTL (renewed early: still two thirds left),
                # so leases taken moments apart are renewed in one batch, not one wake each
                soon = now + self.ttl_s / 6
                for h, _ in [v for v in self._beating.values() if v[0].lost.is_set()]:
                    del self._beating[id(h)]  # given up (handed back at shutdown): not renewed
                due = [h for h, at in self._beating.values() if at <= soon]
                for h in due:
                    self._beating[id(h)] = (h, now + self.ttl_s / 3)
                nxt = min((at for _, at in self._beating.values()), default=now + self.ttl_s)
                if not due:
                    self._beat_wake.wait(max(0.0, nxt - now))
                    continue
            try:  # every lease due now in one batch
                renewed = self.renew_many(due)
            except Exception:  # a lost connection counts as a lost lease
                log.warning("renewing %d lease(s) failed", len(due), exc_info=True)
                renewed = [False] * len(due)
            for h, ok in zip(due, renewed, strict=True):
                if ok:
                    continue
                with self._beat_lock:
                    # a lease no longer kept alive was released meanwhile (its block ended
                    # before the release): not lost, and its holder must not think it was
                    if self._beating.get(id(h), (None,))[0] is not h:
                        continue
                    self._beating.pop(id(h), None)
                log.warning("lease renewal failed for %s", h.conversation_id)
                h.lost.set()
