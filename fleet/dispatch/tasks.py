"""Thin Celery tasks: parse the message, call the dispatcher, log what happened."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from celery.signals import worker_process_shutdown, worker_shutting_down

from fleet.dispatch.celery_app import app
from fleet.runtime import Runtime, build

log = logging.getLogger(__name__)
_lock = threading.Lock()
_runtime: Runtime | None = None


def runtime() -> Runtime:
    """This worker process's runtime, built on first use (after the prefork fork)."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = build()
        return _runtime


@worker_shutting_down.connect
def _stop_draining(**_: Any) -> None:
    if _runtime is not None:
        _runtime.dispatcher.stopping.set()


@worker_process_shutdown.connect
def _close(**_: Any) -> None:
    if _runtime is not None:
        _runtime.close()


@app.task(name="fleet.drain", ignore_result=True)
def drain(conversation_id: str) -> int:
    """Run the conversation's due tasks in order while holding its lease."""
    return runtime().dispatcher.drain(uuid.UUID(conversation_id))


@app.task(name="fleet.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Recover expired leases and re-send lost wake-ups."""
    report = runtime().dispatcher.sweep()
    if report.recovered or report.woken:
        log.info("sweep: recovered %d, woke %d", report.recovered, report.woken)
    return {"recovered": report.recovered, "woken": report.woken}
