"""One asyncio loop per process, on a daemon thread, for async tools and MCP sessions.

The runner is synchronous (it runs in a Celery task or the embedded loop); coroutines are handed
to this loop with ``submit`` and waited on from the calling thread, so cancelling one is just
cancelling its future. The loop is made on first use and again after a fork (prefork workers).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0


def loop() -> asyncio.AbstractEventLoop:
    """This process's background loop (started on first use)."""
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or not _loop.is_running():
            ready = threading.Event()
            new = asyncio.new_event_loop()

            def run() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            threading.Thread(target=run, name="fleet-aio", daemon=True).start()
            ready.wait()
            _loop, _pid = new, os.getpid()
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> Future[T]:
    """Run ``coro`` on the background loop; cancelling the future cancels the coroutine."""
    return asyncio.run_coroutine_threadsafe(coro, loop())


def run(coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
    """Run ``coro`` on the background loop and wait for its result (cancelled on timeout)."""
    future = submit(coro)
    try:
        return future.result(timeout_s)
    except TimeoutError:
        future.cancel()
        raise
