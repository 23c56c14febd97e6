"""The sweeper (``fleet beat``): recovery on a clock of its own, never queued behind wake-ups.

Sent through the wake-up queue, a sweep waited behind every queued drain, so recovering a lost
worker's task took longer the longer the backlog (issue 8). Here a process of its own calls
``Dispatcher.sweep()`` every sweep interval. A Redis key taken once per interval makes several
such processes safe to run side by side (for availability): one of them sweeps each interval.
The same process fires schedules' ticks on a thread of its own (``fleet.dispatch.schedules``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any, Protocol

from redis.exceptions import RedisError

from fleet.constants import SWEEP_TICK_KEY
from fleet.dispatch.manager import worker_name
from fleet.dispatch.recovery import SweepReport
from fleet.errors import FleetError
from fleet.store.db import describe

log = logging.getLogger(__name__)

#: The tick key lives this share of an interval: gone when its taker ticks next, still there
#: when another sweeper ticks in between.
TICK_SHARE = 0.9
#: Logged once the loop runs (tests and operators can wait for it).
STARTED = "fleet sweeper started"


class Sweeps(Protocol):
    def sweep(self) -> SweepReport:
        """Recover expired leases and re-send lost wake-ups."""


class Sweeper:
    """Sweeps every ``interval_s`` seconds, in the intervals whose tick it takes."""

    def __init__(self, dispatcher: Sweeps, redis: Any, interval_s: float) -> None:
        self._dispatcher = dispatcher
        self._redis = redis
        self.interval_s = interval_s
        self._tick_ms = max(1, int(interval_s * TICK_SHARE * 1000))
        #: Who took the tick (``host:pid``), for an operator reading the key.
        self.name = worker_name()

    def tick(self) -> SweepReport | None:
        """Sweep unless another sweeper already did in this interval (then None)."""
        if not self._redis.set(SWEEP_TICK_KEY, self.name, nx=True, px=self._tick_ms):
            return None
        return self._dispatcher.sweep()

    def tick_logged(self) -> SweepReport | None:
        """One tick; an outage or a bug is a logged warning, not raised: the next tick retries."""
        try:
            report = self.tick()
        except FleetError as exc:  # the database is down (Unavailable)
            log.warning("sweep skipped: %s", exc.message)
        except (RedisError, OSError) as exc:
            log.warning("sweep skipped: Redis unavailable: %s", exc)
        except Exception as exc:
            log.warning("sweep failed: %s: %s", type(exc).__name__, describe(exc))
            log.debug("sweep failure", exc_info=True)
        else:
            if report is not None and (report.recovered or report.woken):
                log.info("sweep: recovered %d, woke %d", report.recovered, report.woken)
            return report
        return None

    def run(self, stop: threading.Event, *, parent_pid: int | None = None) -> None:
        """Tick every interval until ``stop`` is set, or until ``parent_pid`` is not our parent."""
        log.info("%s: every %gs as %s", STARTED, self.interval_s, self.name)
        due = time.monotonic()
        while not stop.is_set():
            if parent_pid is not None and os.getppid() != parent_pid:
                log.info("fleet sweeper stopping: its parent process %d is gone", parent_pid)
                return
            self.tick_logged()
            # Fixed rate; after a sweep longer than the interval, the next one starts at once.
            due = max(due + self.interval_s, time.monotonic())
            stop.wait(due - time.monotonic())


def main(level: int = logging.INFO, *, parent_pid: int | None = None) -> None:
    """Build the runtime (fails fast on bad config or schema), then sweep until SIGTERM/SIGINT;
    the schedule loop (``fleet.dispatch.schedules``) fires due ticks on a thread beside."""
    from fleet.dispatch.registry import newer_live
    from fleet.dispatch.schedules import Scheduler
    from fleet.runtime import build, redis_client

    log.setLevel(min(level, logging.getLogger().getEffectiveLevel()))
    rt = build()
    rt.register("beat")
    client = redis_client(rt.settings)
    stop = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()  # the loop's wait returns at once; a sweep under way finishes first

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    logging.getLogger("fleet.dispatch.schedules").setLevel(log.level)
    schedules = Scheduler(rt.dispatcher, newer=newer_live(client))
    schedules.start(stop)
    try:
        Sweeper(rt.dispatcher, client, rt.settings.sweep_interval).run(stop, parent_pid=parent_pid)
    finally:
        schedules.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        client.close()
        rt.close()
    log.info("fleet sweeper stopped")
