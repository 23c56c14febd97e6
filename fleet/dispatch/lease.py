"""The conversation lease port: who may work a conversation now (Redis or in-process).

A lease keeps workers from contending; it is not mutual exclusion on its own (a stalled holder
can outlive it), which is why every write of a run is also fenced in the store.
"""

from __future__ import annotations

import logging
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LeaseHandle:
    """A held lease: its conversation, its token, and whether renewal failed since."""

    conversation_id: uuid.UUID
    token: str
    lost: threading.Event = field(default_factory=threading.Event)


class Lease(ABC):
    """Per-conversation lease with a time-to-live, renewed by a heartbeat while a run works."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s

    @abstractmethod
    def acquire(self, conversation_id: uuid.UUID) -> LeaseHandle | None:
        """Take the lease if nobody holds it (None otherwise)."""

    @abstractmethod
    def renew(self, handle: LeaseHandle) -> bool:
        """Extend the lease by its TTL; False if it expired or another holder took it."""

    @abstractmethod
    def release(self, handle: LeaseHandle) -> None:
        """Give the lease up if still ours (never someone else's)."""

    @abstractmethod
    def held(self, conversation_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these conversations have a live lease right now."""

    @staticmethod
    def new_token() -> str:
        return uuid.uuid4().hex

    @contextmanager
    def kept_alive(self, handle: LeaseHandle) -> Iterator[LeaseHandle]:
        """Renew every TTL/3 until the block ends; a failed renewal sets ``handle.lost``."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.ttl_s / 3):
                try:
                    ok = self.renew(handle)
                except Exception:  # a lost connection counts as a lost lease
                    log.warning(
                        "lease renewal failed for %s", handle.conversation_id, exc_info=True
                    )
                    ok = False
                if not ok:
                    handle.lost.set()
                    return

        thread = threading.Thread(target=beat, name="fleet-lease-heartbeat", daemon=True)
        thread.start()
        try:
            yield handle
        finally:
            done.set()
            thread.join()
