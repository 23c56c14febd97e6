"""MCP connections kept across runs (``lifetime = "worker"``): per entry and tenant, per process.

A run leases the kept connection of its server entry and tenant (``McpToolServer._key``), or
starts it when there is none. Before a run uses a kept connection it must list its tools again: one
that died (its process exited, the HTTP session ended) or hung is closed and started anew, with
the same errors as a first start. A connection no run used for ``idle_timeout`` is closed; the
worker process's shutdown (``Runtime.close``) and the interpreter's exit close all of them. A
process killed outright takes its stdio servers with it (``mcp_process``). After a fork the
child keeps none of its parent's connections: they belong to the parent's loop and processes.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from fleet.agents import aio
from fleet.agents.tools.mcp_session import Opened, describe
from fleet.config import McpServerConfig

log = logging.getLogger(__name__)

#: Longest a kept connection gets to list its tools again before a run uses it (at most its
#: ``connect_timeout``); past it, it counts as hung and is started anew.
CHECK_TIMEOUT_S = 5.0


@dataclass(eq=False)
class Kept:
    """A kept connection and who uses it."""

    key: Hashable
    opened: Opened
    #: Runs holding it now.
    users: int = 0
    #: When the last run let go of it (monotonic seconds).
    idle_since: float = field(default_factory=time.monotonic)
    #: A timer will look whether it stayed idle for ``idle_timeout``.
    expiring: bool = False

    async def _relist(self) -> None:
        self.opened.listed = await self.opened.session.relist()

    def answers(self, timeout_s: float) -> bool:
        """Does the server still answer (within ``timeout_s``)? Its tools as it lists them now."""
        if not self.opened.session.alive:
            return False
        try:
            aio.run(self._relist(), timeout_s)
        except TimeoutError:
            log.warning("a kept MCP connection did not list its tools within %gs", timeout_s)
            return False
        except Exception as exc:  # Gone, or the server's error
            log.info("a kept MCP connection is gone: %s", describe(exc))
            return False
        return True


class WarmPool:
    """This process's kept MCP connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[Hashable, Kept] = {}
        #: One start (or check) at a time per key, so two runs do not start two servers.
        self._starting: dict[Hashable, threading.Lock] = {}

    @contextmanager
    def lease(
        self, key: Hashable, start: Callable[[], Opened], config: McpServerConfig
    ) -> Iterator[Opened]:
        """The kept connection for ``key`` (started by ``start`` if need be) for one run."""
        kept = self._take(key, start, min(CHECK_TIMEOUT_S, config.connect_timeout))
        try:
            yield kept.opened
        finally:
            self._give_back(kept, config.idle_timeout)

    def _take(self, key: Hashable, start: Callable[[], Opened], check_s: float) -> Kept:
        with self._lock:
            gate = self._starting.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                kept = self._kept.get(key)
                busy = kept is not None and kept.users > 0
            # In use by another run, a slow answer may be a busy server, not a hung one: only
            # a connection known to be gone is replaced then (the other run's calls are bounded).
            if kept is not None and not (
                kept.opened.session.alive if busy else kept.answers(check_s)
            ):
                self._drop(kept, wait=True)
                kept = None
            if kept is None:
                kept = Kept(key, start())  # ToolServerError: the run fails as on a first start
                with self._lock:
                    self._kept[key] = kept
            with self._lock:
                kept.users += 1
            return kept

    def _give_back(self, kept: Kept, idle_timeout: float) -> None:
        with self._lock:
            kept.users -= 1
            kept.idle_since = time.monotonic()
            mine = self._kept.get(kept.key) is kept
        if not mine:  # dropped (or never kept) while in use: this run was its last
            if kept.users == 0:
                kept.opened.close()
            return
        with self._lock:
            schedule = kept.users == 0 and not kept.expiring
            kept.expiring = kept.expiring or schedule
        if schedule:  # one timer per connection, moved on while runs keep using it
            loop = aio.loop()
            loop.call_soon_threadsafe(
                loop.call_later, idle_timeout, self._expire, kept, idle_timeout
            )

    def _expire(self, kept: Kept, idle_timeout: float) -> None:
        """On the loop: close the connection if it stayed idle for ``idle_timeout``."""
        with self._lock:
            idle = time.monotonic() - kept.idle_since
            if kept.users or self._kept.get(kept.key) is not kept:
                kept.expiring = False  # in use (its last run schedules anew) or gone
                return
            if idle < idle_timeout:
                asyncio.get_running_loop().call_later(
                    idle_timeout - idle, self._expire, kept, idle_timeout
                )
                return
            del self._kept[kept.key]
        log.info("closing an MCP connection idle for %.0fs", idle)
        threading.Thread(target=kept.opened.close, name="fleet-mcp-idle", daemon=True).start()

    def _drop(self, kept: Kept, *, wait: bool) -> None:
        with self._lock:
            if self._kept.get(kept.key) is kept:
                del self._kept[kept.key]
            in_use = kept.users > 0
        if in_use:  # the last run using it closes it (``_give_back``)
            kept.opened.session.begin_close()
        elif wait:
            kept.opened.close()

    def close_all(self) -> None:
        """Close every kept connection (the process is ending); bounded per connection."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for each in kept:
            each.opened.session.begin_close()  # all at once; then wait for each
        for each in kept:
            each.opened.close()

    def forget(self) -> None:
        """After a fork: the parent's connections are not this process's to use or close."""
        self._lock = threading.Lock()
        self._kept = {}
        self._starting = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)


#: This process's pool.
POOL = WarmPool()


def close_all() -> None:
    """Close this process's kept MCP connections (worker shutdown, embedded close, exit)."""
    POOL.close_all()


atexit.register(close_all)
os.register_at_fork(after_in_child=POOL.forget)
