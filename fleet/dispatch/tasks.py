"""Thin Celery tasks: parse the message, call the dispatcher, log what happened."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from fleet import gcpause, release
from fleet.agents import telemetry
from fleet.constants import DEFAULT_PRIORITY, DEFAULT_TENANT
from fleet.dispatch import pool_exit, shutdown
from fleet.dispatch.celery_app import app
from fleet.errors import Unavailable
from fleet.runtime import Runtime, build
from fleet.store import db

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")
#: How long a pool process, on its way out, waits for the worker to read its last result.
#: billiard waits up to 30 s; a task handed over in the first milliseconds of a warm shutdown
#: (a ``fleet.turn`` token, say) finishes after the worker stopped reading, so it waited them
#: all. Its message is then not acked and returns to the queue, and every fleet task is
#: idempotent (a token or drain finds nothing to do, a delivery is claimed once).
RESULT_READ_WAIT_S = 3.0
_lock = threading.Lock()
_process: dict[str, Runtime] = {}


def runtime() -> Runtime:
    """This worker process's runtime, built on first use (after the prefork fork)."""
    with _lock:
        if "rt" not in _process:
            _process["rt"] = build()
        return _process["rt"]


#: A pool process's SIGTERM outside a drain (``shutdown.sigterm_stops`` handles those, then lets
#: it take its course): the process ends between jobs, through the pool's own exit path, so
#: ``worker_process_shutdown`` still runs (spans flushed, the runtime closed) and no job that
#: ended well is reported lost (a process manager signalling the whole group).
pool_exit.install()
release.current()  # read once here (a git call at most), before the pool processes fork


def _stop_requested(signum: int, frame: object) -> None:
    """The worker's ``STOP_SIGNAL`` outside a drain: take no more work; the pool ends the
    process when the worker's shutdown closes it."""
    if "rt" in _process:
        _process["rt"].dispatcher.stopping.set()


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _warm(**_: Any) -> None:
    """Build the runtime when the pool process starts, so the first task is not the slow one."""
    pool_exit.initializing()
    signal.signal(shutdown.STOP_SIGNAL, _stop_requested)
    _bound_result_read_wait()
    try:
        runtime().register("worker", slots=1)  # a prefork pool process runs one run at a time
        runtime().dispatcher.execution.warm()
        telemetry.tracer()  # decided (and, if on, configured) in this process, after the fork
    except Exception:  # the first task tries again and reports the reason
        log.exception("could not prepare the worker runtime")
    gcpause.freeze_startup()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _runs_in_threads(sender: Any = None, **_: Any) -> None:
    """A worker whose pool runs tasks on threads of this process (``-P threads -c N``, what
    ``fleet worker --runs N`` starts): this process holds up to N runs in flight, so it builds
    its runtime now and registers with N slots. (Prefork pool processes do so when they start.)"""
    from celery.concurrency.thread import TaskPool

    pool = getattr(sender, "pool", None)
    if not isinstance(pool, TaskPool):
        return
    try:
        runtime().register("worker", slots=int(pool.limit or 1))
        runtime().dispatcher.execution.warm()
    except Exception:  # the first task tries again and reports the reason
        log.exception("could not prepare the worker runtime")
    # Hundreds of runs in flight hold many objects alive for seconds: as in an API process,
    # young passes are rarer (fewer of them promoted) and start-up's objects are never walked.
    gcpause.fewer_promotions()
    gcpause.freeze_startup()


def _bound_result_read_wait() -> None:
    from billiard import pool  # type: ignore[import-untyped]

    interval = getattr(pool, "GUARANTEE_MESSAGE_CONSUMPTION_RETRY_INTERVAL", None)
    if isinstance(interval, int | float) and interval > 0:
        pool.GUARANTEE_MESSAGE_CONSUMPTION_RETRY_LIMIT = max(1, int(RESULT_READ_WAIT_S / interval))


@worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _stop_draining(**_: Any) -> None:
    """Warm (or cold) shutdown began in this worker's main process: stop the runs in flight.

    Runs in pool processes (prefork) are told by a ``shutdown.STOP_SIGNAL`` each, which their
    drain turns into a graceful stop (``shutdown.sigterm_stops``) and an idle process into
    taking no more work; runs in this process (solo, threads) directly.
    """
    from celery.worker import state

    if "rt" in _process:
        dispatcher = _process["rt"].dispatcher
        grace = _process["rt"].settings.shutdown_grace
        threading.Thread(target=_stop_here, args=(dispatcher, grace), daemon=True).start()
    busy = {getattr(r, "worker_pid", None) for r in list(state.active_requests)}
    for pid in busy:
        if isinstance(pid, int) and pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, shutdown.STOP_SIGNAL)


def _stop_here(dispatcher: Any, grace_s: float) -> None:
    """Hand back the runs of this process within the grace period; a run abandoned mid-step
    (its thread may never return from its model or tool) ends the process once handed back."""
    abandoned = dispatcher.shut_down(grace_s)
    if abandoned:
        _abandoned(abandoned)


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _close(**_: Any) -> None:
    # Pool processes end without atexit handlers: flush this process's spans here.
    telemetry.shutdown()
    if "rt" in _process:
        _process["rt"].close()


@worker_shutdown.connect  # type: ignore[untyped-decorator]
def _close_here(**_: Any) -> None:
    """The worker's main process is done (its pool stopped): a worker whose runs ran on its
    threads closes their runtime too, leaving the fleet's registry now rather than when its
    entry expires. (A prefork worker's main process builds none.)"""
    if "rt" in _process:
        _close()


def _outage_logged(task: Callable[P, R]) -> Callable[P, R | None]:
    """A task that meets a database or Redis it cannot use logs one line saying why
    (``db.describe``: a pooler's mode names ``FLEET_DATABASE_POOLER``), not a traceback: its
    message is only a wake-up, and the sweep sends it again."""

    @functools.wraps(task)
    def logged(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return task(*args, **kwargs)
        except Unavailable as exc:
            log.warning("%s skipped: %s", task.__name__, exc.message)
        except Exception as exc:
            if not db.is_outage(exc):
                raise
            log.warning("%s skipped: %s: %s", task.__name__, type(exc).__name__, db.describe(exc))
        return None

    return logged


@app.task(name="fleet.turn", ignore_result=True)  # type: ignore[untyped-decorator]
@_outage_logged
def turn() -> int:
    """A token of the fair queue: take turns at due conversations, fairly across tenants."""
    rt = runtime()
    turns = rt.turns
    if turns is None:  # not a plain Redis broker: wake-ups come as fleet.drain, one each
        return 0
    with shutdown.sigterm_stops(rt.dispatcher, rt.settings.shutdown_grace, _abandoned):
        return rt.dispatcher.take_turns(turns)


@app.task(name="fleet.drain", ignore_result=True)  # type: ignore[untyped-decorator]
@_outage_logged
def drain(conversation_id: str, tenant: str | None = None, priority: int | None = None) -> int:
    """A delayed wake-up that is due: the conversation joins the fair queue as its tenant's
    turn. Without a tenant (a broker the fair queue cannot use, or a message sent before
    tenants), run the conversation's due tasks at once while holding its lease."""
    rt = runtime()
    conversation = uuid.UUID(conversation_id)
    if tenant is not None and rt.turns is not None:
        rt.dispatcher.waker.wake(
            conversation, tenant=tenant, priority=DEFAULT_PRIORITY if priority is None else priority
        )
        return 0
    with shutdown.sigterm_stops(rt.dispatcher, rt.settings.shutdown_grace, _abandoned):
        return rt.dispatcher.drain(
            conversation,
            tenant=tenant or DEFAULT_TENANT,
            priority=DEFAULT_PRIORITY if priority is None else priority,
        )


def _abandoned(count: int) -> None:
    """The grace period ended mid-step: the tasks are handed back; this pool process ends now
    (its step may never return; the main process counts its message as lost and requeues it)."""
    log.warning("grace period over: %d run(s) abandoned mid-step and handed back", count)
    telemetry.shutdown()
    os._exit(1)


@app.task(  # type: ignore[untyped-decorator]
    name="fleet.memorize",
    ignore_result=True,
    autoretry_for=(Exception,),
    retry_backoff=True,
    max_retries=5,
)
def memorize(conversation_id: str) -> dict[str, int]:
    """Embed a conversation's new messages and observe its older history (recall,
    observations): off the hot path, retried."""
    return runtime().dispatcher.sources.memorize(uuid.UUID(conversation_id))


@app.task(name="fleet.deliver", ignore_result=True)  # type: ignore[untyped-decorator]
@_outage_logged
def deliver(delivery_id: str) -> None:
    """One attempt of a reply delivery; a retry is sent again after its backoff (the sweeper
    starts one whose message was lost)."""
    runtime().dispatcher.deliveries.run(uuid.UUID(delivery_id))
