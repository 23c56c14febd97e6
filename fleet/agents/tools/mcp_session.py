"""One MCP connection on the background loop, from connect to close, as a single coroutine.

The SDK's client context managers (the stdio or streamable HTTP transport and the session) are
anyio-based and must be entered and exited by one task. So one coroutine per connection, on
``fleet.agents.aio``'s loop, starts the server, negotiates, lists the tools, then holds the
connection open until ``close()``; each tool call runs as a child of that coroutine's task
group. Cancelling a call's awaiting coroutine (a stop or timeout in the executor) cancels the
child, and the SDK then sends the server ``notifications/cancelled`` for the request (or, on a
2026-07-28 HTTP connection, aborts the request's own POST, which is that wire's cancellation).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup
from mcp import Client
from mcp import types as mcp_types

from fleet.agents import aio

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long closing a connection may take (a stdio server gets stdin closed, then SIGTERM, then
#: SIGKILL from the SDK, each step bounded); past it the connection is abandoned.
CLOSE_TIMEOUT_S = 10.0
#: The longest listing fleet follows (pages of ``tools/list``).
MAX_LIST_PAGES = 50


class SessionError(Exception):
    """The connection failed; ``stage`` says when: ``start``, ``timeout`` or ``list``."""

    def __init__(self, stage: str, cause: BaseException | None, detail: str = "") -> None:
        super().__init__(detail or describe(cause))
        self.stage = stage
        self.cause = cause


class Gone(Exception):
    """The connection is closed (the server exited or the run is over)."""


class Session:
    """A live MCP connection: ``start()`` lists the tools, ``call()`` runs on the loop."""

    def __init__(self, client: Callable[[], Client], connect_timeout: float) -> None:
        self._make_client = client
        self._connect_timeout = connect_timeout
        self._ready: Future[list[mcp_types.Tool]] = Future()
        self._task: Future[None] | None = None
        self._client: Client | None = None
        self._group: TaskGroup | None = None
        self._closing: asyncio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self.ended: BaseException | None = None

    # -- the calling thread ---------------------------------------------------------------

    def start(self) -> list[mcp_types.Tool]:
        """Connect and list the tools; SessionError says what went wrong (bounded in time)."""
        self._task = aio.submit(self._main())
        try:
            return self._ready.result(timeout=self._connect_timeout + CLOSE_TIMEOUT_S)
        except FutureTimeout:
            self._task.cancel()  # the SDK's shielded shutdown still ends a child process
            raise SessionError("timeout", None) from None

    def begin_close(self) -> None:
        """Ask the connection to end, without waiting (any thread, also the loop's)."""
        task = self._task
        if task is not None and not task.done():
            aio.loop().call_soon_threadsafe(self._request_close)

    def close(self) -> None:
        """End the connection (and a stdio server's process); never waits past the bound."""
        task = self._task
        if task is None or task.done():
            return
        self.begin_close()
        try:
            task.result(timeout=CLOSE_TIMEOUT_S + 1.0)
        except FutureTimeout:
            log.warning("an MCP connection did not close within %gs; left behind", CLOSE_TIMEOUT_S)
            task.cancel()
        except BaseException:  # how it ended was logged by the coroutine
            return

    # -- the background loop ---------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Connected, as far as this side knows (the server may still have hung)."""
        return self._group is not None and self.ended is None

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call a tool as a child of the connection; cancelling this cancels the request."""
        return await self._child(lambda client: client.call_tool(name, arguments))

    async def relist(self) -> list[mcp_types.Tool]:
        """List the tools again: a kept connection's proof of life before a run uses it
        (``ping`` is gone from the protocol as of 2026-07-28)."""
        return await self._child(_list_tools)

    async def _child(self, send: Callable[[Client], Awaitable[T]]) -> T:
        """Send one request as a child of the connection; cancelling this cancels it."""
        group, client = self._group, self._client
        if group is None or client is None or self.ended is not None:
            raise Gone(describe(self.ended) if self.ended else "not connected")
        answer: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        scope = anyio.CancelScope()

        async def request() -> None:
            try:
                with scope:
                    result = await send(client)
                    if not answer.done():
                        answer.set_result(result)
            except Exception as exc:
                if not answer.done():
                    answer.set_exception(exc)
            finally:
                if not answer.done():  # cancelled: by the caller, or the connection closed
                    answer.set_exception(Gone("the connection closed during the call"))

        try:
            group.start_soon(request)
        except RuntimeError:  # the task group has exited
            raise Gone("the connection is closed") from None
        try:
            return await answer
        except asyncio.CancelledError:
            scope.cancel()  # the SDK sends the server its cancellation for this request
            raise

    def _request_close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._scope is not None:
            # (anyio's clock on asyncio is the loop's; this runs as a plain loop callback)
            self._scope.deadline = asyncio.get_running_loop().time() + CLOSE_TIMEOUT_S - 2.0

    async def _main(self) -> None:
        self._closing = asyncio.Event()
        scope = self._scope = anyio.CancelScope(
            deadline=anyio.current_time() + self._connect_timeout
        )
        stage = "start"
        try:
            with scope:
                async with self._make_client() as client:
                    stage = "list"
                    tools = await _list_tools(client)
                    scope.deadline = math.inf
                    async with anyio.create_task_group() as group:
                        self._client, self._group = client, group
                        self._ready.set_result(tools)
                        await self._closing.wait()
                        group.cancel_scope.cancel()
            if not self._ready.done():  # the deadline passed while connecting or listing
                self._ready.set_exception(SessionError("timeout", None))
        except BaseException as exc:
            self.ended = exc
            if not self._ready.done():
                timed_out = scope.cancel_called and not self._closing.is_set()
                self._ready.set_exception(SessionError("timeout" if timed_out else stage, exc))
            else:
                log.info("MCP connection ended: %s", describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._group = None
            if self.ended is None:
                self.ended = Gone("the connection is closed")


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise SessionError("list", None, f"tools/list gave more than {MAX_LIST_PAGES} pages")


def leaves(exc: BaseException) -> Sequence[BaseException]:
    """The exceptions inside (nested) exception groups, or the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(leaves(inner))
        return found
    return [exc]


def describe(exc: BaseException | None) -> str:
    """One line for an exception, looking inside exception groups and through causes."""
    if exc is None:
        return "unknown error"
    first = leaves(exc)[0]
    text = str(first).strip().splitlines()[0] if str(first).strip() else ""
    name = type(first).__name__
    return f"{name}: {text}" if text else name


@dataclass(eq=False)
class Opened:
    """A started connection with what a run needs of it: its tools and its call slots."""

    session: Session
    listed: list[mcp_types.Tool]
    #: Calls in flight at once (``max_concurrent_calls``); more wait their turn.
    slots: asyncio.Semaphore
    #: Closed with the connection (a stdio server's stderr, say).
    resources: Sequence[Closable] = ()

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call a tool once a slot is free; a call that waits can still time out or stop."""
        async with self.slots:
            return await self.session.call(name, arguments)

    def close(self) -> None:
        """End the connection and release what it held (bounded, see ``Session.close``)."""
        self.session.close()
        for resource in self.resources:
            resource.close()


class Closable(Protocol):
    def close(self) -> None: ...
