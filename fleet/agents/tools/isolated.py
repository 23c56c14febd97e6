"""Python tools that run in a process of their own (``isolation = "process"``).

A CPU-heavy tool holds the GIL: on its run's thread it would slow every other run of the worker
process. Such a tool runs in a child process instead, taken from a small pool of idle children
(started with ``spawn``: no copy of the worker's threads and sockets) and returned to it after
the call. A call that times out or must stop (a cancel, a lost lease) kills its child, so a tool
that never returns costs a process for its timeout, not a thread or a slot forever. The child
imports the tool's module itself and gets the run's context as plain values (its ``cancelled``
is never set: the call is stopped by killing it).
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from fleet.agents.tools.base import ToolContext

#: Idle children kept for the next call (more run at once when calls need them).
KEEP_IDLE = 2


class _Child:
    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_end = ctx.Pipe()
        self.process: BaseProcess = ctx.Process(
            target=_serve, args=(child_end,), name="fleet-tool-process", daemon=True
        )
        self.process.start()
        child_end.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class ProcessTools:
    """This process's pool of tool children."""

    def __init__(self, keep_idle: int = KEEP_IDLE) -> None:
        self.keep_idle = keep_idle
        self._lock = threading.Lock()
        self._idle: list[_Child] = []
        #: Children killed because their call timed out or had to stop (tests).
        self.killed = 0

    def submit(self, ref: str, args: dict[str, Any], ctx: ToolContext) -> Future[str]:
        """Call tool ``ref`` (``module:function``) in a child; ``kill(future)`` ends it."""
        child = self._take()
        future: Future[str] = Future()
        future.set_running_or_notify_cancel()
        future.fleet_child = child  # type: ignore[attr-defined]
        plain = {
            "task_id": ctx.task_id,
            "run_id": ctx.run_id,
            "labels": dict(ctx.labels),
            "conversation_id": ctx.conversation_id,
            "call_id": ctx.call_id,
            "tenant": ctx.tenant,
        }

        def wait() -> None:
            try:
                child.conn.send((ref, args, plain))
                ok, value = child.conn.recv()
            except (EOFError, OSError):  # killed (a timeout, a stop), or it died
                if not future.done():
                    future.set_exception(RuntimeError("the tool's process ended without an answer"))
                return
            self._give_back(child)
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        threading.Thread(target=wait, name="fleet-tool-process-wait", daemon=True).start()
        return future

    def kill(self, future: Future[str]) -> None:
        """End the call of ``future``: its child is killed (not reused)."""
        child: _Child | None = getattr(future, "fleet_child", None)
        if child is not None and child.process.is_alive():
            self.killed += 1
            child.kill()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.process.is_alive():
                    return child
        return _Child()

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            if len(self._idle) < self.keep_idle and child.process.is_alive():
                self._idle.append(child)
                return
        child.kill()


def _serve(conn: Connection) -> None:
    """A child's loop: call the tools it is sent, one at a time, until the pipe closes."""
    from fleet.agents.tools.python import from_function, resolve

    tools: dict[str, Any] = {}
    while True:
        try:
            ref, args, plain = conn.recv()
        except (EOFError, OSError):
            return
        try:
            tool = tools.get(ref)
            if tool is None:
                tool = tools[ref] = from_function(resolve(ref), origin=ref)
            assert tool.fn is not None, "an async tool runs on the worker's loop"
            answer: tuple[bool, Any] = (True, tool.fn(args, ToolContext(**plain)))
        except BaseException as exc:  # the call's failure is the model's result
            answer = (False, _portable(exc))
        try:
            conn.send(answer)
        except (EOFError, OSError):
            return


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles (a ToolError keeps its meaning), else a RuntimeError saying it."""
    import pickle

    try:
        pickle.dumps(exc)
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


#: The worker process's pool (children start on a tool's first call).
POOL = ProcessTools()
