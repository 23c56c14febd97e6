"""Calling one tool: timeouts, errors as results, and stopping when the run must stop.

A sync tool runs on a thread of its own and an async one on the process's background loop
(``fleet.agents.aio``); either way the calling thread waits in short slices and asks ``watch``
between them whether the run must stop (cancel requested, lease lost). Then the tool's context
is marked cancelled (a sync tool polls it), an async tool's coroutine is cancelled (an MCP call
sends the server its cancellation), and the call ends without waiting for a tool that ignores
it. A timeout does the same but gives the model an error result and the run goes on.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from fleet import logs
from fleet.agents import aio
from fleet.agents.tools import isolated
from fleet.agents.tools.base import Park, Tool, ToolContext, ToolError, ToolGone
from fleet.domain.waits import Request

#: How often a waiting call asks whether the run must stop (seconds).
POLL_S = 0.1
#: How long a stopped sync tool gets to return on its own before the call ends without it.
STOP_GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one call gave: the text the model sees, an error if it failed, or a stop."""

    text: str
    error: str | None = None
    #: The run must stop (cancel or lost lease): the call was abandoned, not answered.
    stopped: bool = False
    #: The tool must wait for this (``Park``): the run stops here and calls it again later.
    wait: Request | None = None


def _in_thread(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> Future[str]:
    future: Future[str] = Future()
    assert tool.fn is not None
    fn = tool.fn
    caller = contextvars.copy_context()  # the run's log context reaches the tool's records

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(caller.run(fn, args, ctx))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, name=f"fleet-tool-{tool.name}", daemon=True).start()
    return future


def call(
    tool: Tool,
    args: dict[str, Any],
    ctx: ToolContext,
    *,
    timeout_s: float,
    watch: Callable[[], bool] = lambda: False,
) -> CallResult:
    """Run ``tool`` once; every failure is a result the model sees, except a stop (and a tool
    that is gone, ``ToolGone``, which fails the run)."""
    if tool.afn is not None:
        future: Future[str] = aio.submit(_awaited(tool, args, ctx, logs.current()))
    elif tool.isolation == "process":
        future = isolated.POOL.submit(tool.origin, args, ctx)
    else:
        future = _in_thread(tool, args, ctx)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _result(
                future.result(timeout=min(POLL_S, max(0.0, deadline - time.monotonic())))
            )
        except FutureTimeout:
            pass
        except CancelledError:
            return CallResult(text="stopped: the run is stopping", error="stopped", stopped=True)
        except ToolError as exc:
            return CallResult(text=f"error: {exc}", error=str(exc))
        except Park as parked:
            return CallResult(text="", wait=parked.request)
        except ToolGone:  # the run fails, naming the tool (fleet.agents.tools.toolbox.gone)
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            return CallResult(text=f"error: the tool raised {reason}", error=reason)
        if watch():
            _stop(future, ctx)
            return CallResult(text="stopped: the run is stopping", error="stopped", stopped=True)
        if time.monotonic() >= deadline:
            _stop(future, ctx)
            reason = f"timed out after {timeout_s:g}s"
            return CallResult(text=f"error: the tool {reason}", error=reason)


async def _awaited(
    tool: Tool, args: dict[str, Any], ctx: ToolContext, log: Mapping[str, Any]
) -> str:
    assert tool.afn is not None
    with logs.context(**log):  # the loop's thread does not have the run's log context
        return await tool.afn(args, ctx)


def _stop(future: Future[str], ctx: ToolContext) -> None:
    """Tell the tool to stop; give a sync tool a moment to notice, then leave it behind (a tool
    in a process of its own is killed)."""
    ctx.cancelled.set()
    isolated.POOL.kill(future)
    if future.cancel():
        return
    try:
        future.result(timeout=STOP_GRACE_S)
    except BaseException:  # whatever it ends with, the call is over
        return


def _result(value: Any) -> CallResult:
    if not isinstance(value, str):
        raise TypeError(f"a tool must return text, got {type(value).__name__}")
    return CallResult(text=value)
