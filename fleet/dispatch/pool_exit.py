"""How a Celery pool process ends on SIGTERM: between jobs, never in the middle of one.

A process manager that signals a worker's whole process group (systemd, a terminal's Ctrl-C,
``kill -- -PGID``) sends SIGTERM to every pool process too, while the worker's main process
starts its warm shutdown. billiard's own handler in a pool process exits at once, from inside
whatever the process is doing: a job that had just ended gracefully (a drain hands its task
back, ``shutdown.sigterm_stops``, then lets the signal take its course) never reports, and the
main process logs it as lost (``WorkerLostError: Worker exited prematurely: signal 15``) though
nothing was. Here a pool process instead

- waiting for a job: exits with status 0 (an expected exit, not logged as a crash);
- running one: lets it finish and report its result, then exits before taking another.

Installed in the main process before its pool starts (``install``); each pool process sets
itself up when its loop starts, after billiard has set its own signal handlers.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

#: A pool process's exit status when it leaves on SIGTERM: billiard's EX_OK, not logged.
EX_OK = 0


@dataclass
class _PoolProcess:
    #: This is a pool process set up here (False in the main process and other pools).
    active: bool = False
    #: Waiting for a job (nothing would be lost by leaving now).
    idle: bool = False
    #: SIGTERM came while a job ran: leave before the next one.
    leaving: bool = False


STATE = _PoolProcess()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if STATE.idle:
        raise SystemExit(EX_OK)
    STATE.leaving = True


def _leave_between_jobs(receive: Callable[..., Any]) -> Callable[..., Any]:
    """billiard's "wait for the next job", leaving first when a SIGTERM asked to."""

    def wait_for_job(*args: Any, **kwargs: Any) -> Any:
        if STATE.leaving:
            raise SystemExit(EX_OK)
        STATE.idle = True
        try:
            return receive(*args, **kwargs)
        finally:
            STATE.idle = False

    return wait_for_job


def initializing() -> None:
    """A pool process's SIGTERM while it starts (Celery's process initializer builds the
    runtime, which takes a while): no job yet, so it leaves at once with status 0, instead of
    dying by the signal as the initializer's reset handlers would let it (logged as a crash)."""

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(EX_OK)

    signal.signal(signal.SIGTERM, leave)


def start(worker: Any) -> None:
    """Set this pool process up (billiard's ``Worker``, as its loop starts)."""
    worker.wait_for_job = _leave_between_jobs(worker.wait_for_job)
    signal.signal(signal.SIGTERM, _on_sigterm)
    STATE.active = True


def install() -> None:
    """Make the prefork pool's processes end as this module says (once; in the main process,
    before the pool starts)."""
    from celery.concurrency import asynpool

    original = asynpool.Worker.on_loop_start
    if getattr(original, "_fleet_pool_exit", False):
        return

    def on_loop_start(self: Any, pid: int) -> None:
        start(self)
        original(self, pid)

    on_loop_start._fleet_pool_exit = True  # type: ignore[attr-defined]
    asynpool.Worker.on_loop_start = on_loop_start
