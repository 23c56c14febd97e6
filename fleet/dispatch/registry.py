"""The fleet's registry of live processes in Redis: who runs, which release, how loaded.

One hash (``fleet:procs``), a field per process: its entry (``fleet.domain.registry.Entry``) as
JSON, with the time until which it holds. Each process renews its own entry every third of the
time to live from a thread of its own, and removes it when it stops; an entry that was not
renewed (a process killed) stops counting when its time is up and is removed by the next reader.
One key, so a Redis Cluster keeps it on one slot; a whole fleet has a few hundred processes at
most, so a reader takes the hash whole.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from fleet import release
from fleet.domain.registry import Entry, live, load
from fleet.store import revision

log = logging.getLogger(__name__)

#: The hash of live processes (one field each).
KEY = "fleet:procs"
#: The hash itself expires this long after the last renewal of any entry (a fleet gone).
KEY_TTL_S = 86_400

#: A process's load: (runs in flight, free slots).
Load = Callable[[], tuple[int, int]]


def _idle() -> tuple[int, int]:
    return 0, 0


class Registry:
    """Reads and writes the entries (any process with Redis)."""

    def __init__(self, client: Any, *, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.clock = clock

    def put(self, entry: Entry) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(KEY, entry.id, entry.dump())
        pipe.expire(KEY, KEY_TTL_S)
        pipe.execute()

    def drop(self, entry_id: str) -> None:
        self.client.hdel(KEY, entry_id)

    def read(self) -> list[Entry]:
        """The live entries; those whose time is up are removed on the way."""
        now = self.clock()
        raw: dict[Any, Any] = self.client.hgetall(KEY)
        found: list[Entry] = []
        gone: list[Any] = []
        for field, value in raw.items():
            entry = load(value)
            if entry is None or not entry.alive(now):
                gone.append(field)
            else:
                found.append(entry)
        if gone:
            self.client.hdel(KEY, *gone)
        return live(found, now)


class Membership:
    """This process's entry, renewed by a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        registry: Registry,
        role: str,
        *,
        ttl_s: float,
        load: Load = _idle,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.registry = registry
        self.role = role
        self.ttl_s = ttl_s
        self.load = load
        self.extra = extra or {}
        self.started_at = registry.clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def entry(self) -> Entry:
        now = self.registry.clock()
        in_flight, free = self.load()
        return Entry(
            role=self.role,
            host=socket.gethostname(),
            pid=os.getpid(),
            release=release.current(),
            schema=revision.HEAD,
            started_at=self.started_at,
            seen_at=now,
            expires_at=now + self.ttl_s,
            runs_in_flight=in_flight,
            free_slots=free,
            extra=self.extra,
        )

    def renew(self) -> None:
        """Write the entry now (a failure is logged once per outage; the next renewal retries)."""
        try:
            self.registry.put(self.entry())
        except Exception as exc:
            if not self._failing:
                log.warning("could not renew this process's registry entry: %s", exc)
            self._failing = True
            return
        if self._failing:
            log.info("registry entry renewed again")
        self._failing = False

    def start(self) -> Membership:
        """Register now and keep renewing, on a thread of its own (a process's start-up does
        not wait for Redis)."""
        self._thread = threading.Thread(target=self._loop, name="fleet-registry", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        self.renew()
        while not self._stop.wait(self.ttl_s / 3):
            self.renew()

    def stop(self) -> None:
        """Stop renewing and remove the entry (best effort: it expires anyway)."""
        self._stop.set()
        try:
            self.registry.drop(self.entry().id)
        except Exception:
            log.debug("could not remove this process's registry entry", exc_info=True)


def newer_live(client: Any, *, every_s: float = 5.0) -> Callable[[], bool]:
    """ "Is a process of a release newer than this one registered?", asked of the registry at
    most every ``every_s`` (an unreadable registry counts as no)."""
    own = release.version_of(release.current())
    seen = {"at": -every_s - 1.0, "newer": False}

    def newer() -> bool:
        now = time.monotonic()
        if now - seen["at"] >= every_s:
            try:
                found = Registry(client).read()
                seen["newer"] = any(release.version_of(e.release) > own for e in found)
            except Exception:
                seen["newer"] = False
            seen["at"] = now
        return bool(seen["newer"])

    return newer


def join(client: Any, role: str, *, ttl_s: float, load: Load = _idle) -> Membership:
    """Register this process (``client``: the fleet's Redis) and keep its entry renewed."""
    return Membership(Registry(client), role, ttl_s=ttl_s, load=load).start()
