"""A tool: a name, a JSON schema for its arguments, and a sync or async function; and a tool
server, a source of tools connected for a run (an MCP server)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from fleet.agents.models.base import ToolSpec
from fleet.domain.waits import Request

#: ``safe``: a call that was in flight when its worker was lost may simply run again.
#: ``unsafe``: it may have had its effect; the model is told the outcome is unknown instead.
RetryPolicy = Literal["safe", "unsafe"]


class ToolError(Exception):
    """The call was wrong (bad arguments, refused); the model is told and may try again."""


class Park(Exception):
    """Raised by a tool that must wait for something outside (``call_agent`` for its delegate):
    the run stops at this call, its task waits holding no worker, and the call runs again when
    the task resumes (so the tool must be safe to run again)."""

    def __init__(self, request: Request) -> None:
        super().__init__(f"waits for {request.kind} ({request.tool})")
        self.request = request


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know of the run calling it, and how it learns that it should stop.

    ``cancelled`` is set when the run's task is cancelled, its lease is lost or the call timed
    out. A long sync tool polls ``ctx.stopped()`` (or waits with ``ctx.sleep``) and returns
    early; an async tool is cancelled as a coroutine instead. ``lost`` is set first when the
    stop is this worker letting go of the run (its lease lost, or the run abandoned at
    shutdown): the task goes on elsewhere, so a tool must not undo what it started then.
    """

    task_id: str
    run_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: The conversation the run belongs to.
    conversation_id: str = ""
    #: The model's id of the call being made (set for each call; empty outside one).
    call_id: str = ""
    #: This worker let go of the run (lease lost, abandoned at shutdown); the run's lease's.
    lost: threading.Event = field(default_factory=threading.Event)
    #: The tenant the run serves (a worker-lifetime MCP server is kept per tenant).
    tenant: str = ""

    @property
    def receipt(self) -> str:
        """Names this call across retries of the run: ``<task>:<call id>``."""
        return f"{self.task_id}:{self.call_id}"

    def stopped(self) -> bool:
        """Should the tool stop now (cancel requested, lease lost, timed out)?"""
        return self.cancelled.is_set()

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True if the wait ended because the tool should stop."""
        return self.cancelled.wait(seconds)

    def handed_over(self) -> bool:
        """Did the run stop because another worker will resume it (not cancelled, not over)?"""
        return self.lost.is_set()


SyncFn = Callable[[dict[str, Any], ToolContext], str]
AsyncFn = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model may invoke; exactly one of ``fn`` (sync) and ``afn`` (async)."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: SyncFn | None = None
    afn: AsyncFn | None = None
    #: May a call that was in flight when its worker died run again?
    retry: RetryPolicy = "unsafe"
    #: Seconds a call may take; None means the agent's ``tool_timeout``.
    timeout: float | None = None
    #: Where it came from, for messages: ``builtin``, ``module:function`` or ``mcp:<server>``.
    origin: str = "builtin"
    #: A call waits for a person's approval before it runs (``approval = "required"``, or an
    #: MCP server's ``approval`` globs).
    approval: bool = False
    #: ``process``: a sync Python tool runs in a child process (CPU-heavy work), not on a
    #: thread of the worker (``fleet.agents.tools.isolated``).
    isolation: Literal["thread", "process"] = "thread"

    def __post_init__(self) -> None:
        if (self.fn is None) == (self.afn is None):
            raise ValueError(f"tool {self.name!r} needs exactly one of fn and afn")

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


class ToolGone(Exception):
    """A tool a run started with that this process cannot load any more (its code is gone): the
    run that calls it fails with this message; runs that do not call it go on."""


class ToolServerError(Exception):
    """A tool server (MCP) could not be reached or listed; the message names it."""


class ToolServer(Protocol):
    """A source of tools that must be connected for a run (an MCP server)."""

    name: str

    def connect(self, ctx: ToolContext) -> AbstractContextManager[Sequence[Tool]]:
        """Connect and list the tools (bounded in time); raise ToolServerError naming it."""
        ...
