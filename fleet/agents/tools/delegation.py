"""``call_agent``, ``start_agent`` and ``signal_agent``: hand work to another deployment, or a
message to one of its running tasks, through the run's delegation port.

``call_agent`` waits for the delegated task without a worker: the caller's run stops at the
call, its task waits (holding no process) until the delegated task ends or the agent's
``delegate_timeout`` passes, then the call runs again and finds the result (embedded, it waits
within the caller's step instead, bounded by the tool's timeout and stopped like any tool). A
stop that ends the caller's run (its cancel or interrupt, or the timeout) cancels the delegated
task; a stop that hands the run to another worker (a lost
lease, a run abandoned at shutdown) leaves it running, for the resumed call to wait for.
``start_agent`` returns the task's id at once; its result comes back later as a task of the
caller's conversation. Both admit one task per tool call (the port keys the admission by the
call), so a retried run waits for the same task instead of starting a second one: they are safe
to run again. ``signal_agent`` puts a message into a running task's inbox (read by its run
before its next model call), allowed for tasks of the agent's ``delegates``; the port keys the
message by the call too, so a retried run does not signal twice (safe as well).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleet.agents.tools.base import Park, SyncFn, Tool, ToolContext, ToolError
from fleet.constants import DELEGATION_POLL_S
from fleet.domain.delegation import Refused, call_result, signal_result, started_result
from fleet.domain.waits import Request
from fleet.errors import FleetError

if TYPE_CHECKING:
    from fleet.agents.ports import Delegation

#: The names of the delegation tools (an agent's own tools may not take them).
NAMES = ("call_agent", "start_agent", "signal_agent")


def _args(args: dict[str, Any], delegates: Sequence[str]) -> tuple[str, str]:
    deployment, text = args.get("deployment"), args.get("input")
    if not isinstance(deployment, str) or not deployment:
        raise ToolError(f"deployment must be one of {', '.join(delegates)}, got {deployment!r}")
    if not isinstance(text, str) or not text.strip():
        raise ToolError("input must be the non-empty text of the task to hand over")
    return deployment, text


def _parameters(delegates: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "deployment": {"type": "string", "enum": list(delegates)},
            "input": {"type": "string", "description": "What the other agent should do."},
        },
        "required": ["deployment", "input"],
        "additionalProperties": False,
    }


_SIGNAL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task_id": {"type": "string", "description": "The running task (e.g. from start_agent)."},
        "message": {"type": "string", "description": "What its run should read next."},
    },
    "required": ["task_id", "message"],
    "additionalProperties": False,
}


def tools(port: Delegation, delegates: Sequence[str]) -> list[Tool]:
    """The delegation tools of one run, bound to its port."""

    def delegate(args: dict[str, Any], ctx: ToolContext, *, wait: bool) -> Any:
        deployment, text = _args(args, delegates)
        try:
            return port.delegate(deployment, text, call_id=ctx.call_id, wait=wait)
        except Refused as exc:
            raise ToolError(exc.message) from None
        except FleetError as exc:  # bad input, a full queue: the model may try otherwise
            raise ToolError(exc.message) from None

    def call_agent(args: dict[str, Any], ctx: ToolContext) -> str:
        task = delegate(args, ctx, wait=True)
        if port.parks:  # wait holding no worker: the call runs again when the task resumes
            done = port.poll(task.task_id)
            if done is not None:
                return call_result(done)
            if port.waited(ctx.call_id) == "expired":
                port.cancel(task.task_id)
                return (
                    f"stopped: task {task.task_id} did not finish within {port.timeout_s:g}s "
                    "(delegate_timeout); it was cancelled"
                )
            raise Park(
                Request(
                    "delegate",
                    ctx.call_id,
                    "call_agent",
                    dict(args),
                    port.timeout_s,
                    target_task_id=task.task_id,
                )
            )
        while True:
            done = port.poll(task.task_id)
            if done is not None:
                return call_result(done)
            if ctx.sleep(DELEGATION_POLL_S):
                if ctx.handed_over():  # the run goes on elsewhere and waits for the same task
                    return f"stopped: the run moved to another worker; task {task.task_id} goes on"
                port.cancel(task.task_id)
                return f"stopped: the call was stopped; task {task.task_id} was cancelled"

    def start_agent(args: dict[str, Any], ctx: ToolContext) -> str:
        task = delegate(args, ctx, wait=False)
        return started_result(task.task_id, task.deployment, task.conversation)

    def signal_agent(args: dict[str, Any], ctx: ToolContext) -> str:
        task_id, message = args.get("task_id"), args.get("message")
        if not isinstance(task_id, str) or not task_id.strip():
            raise ToolError("task_id must be the id of a running task (start_agent returns one)")
        if not isinstance(message, str) or not message.strip():
            raise ToolError("message must be the non-empty text to send")
        try:
            done = port.signal(task_id.strip(), message, call_id=ctx.call_id)
        except Refused as exc:
            raise ToolError(exc.message) from None
        except FleetError as exc:  # bad input, a policy's refusal
            raise ToolError(exc.message) from None
        if not done.delivered:
            raise ToolError(signal_result(done))
        return signal_result(done)

    allowed = ", ".join(delegates)
    # All three are safe to run again: the port keys each admission and message by the call.
    table: tuple[tuple[str, SyncFn, str, dict[str, Any]], ...] = (
        (
            "call_agent",
            call_agent,
            "Hand a task to another agent and wait for its reply (a new conversation each "
            f"call). Agents: {allowed}.",
            _parameters(delegates),
        ),
        (
            "start_agent",
            start_agent,
            "Start a task on another agent without waiting; its result arrives later in "
            f"this conversation as a new message. Agents: {allowed}.",
            _parameters(delegates),
        ),
        (
            "signal_agent",
            signal_agent,
            "Send a message to a running task of another agent (e.g. one start_agent "
            f"started); its run reads it before its next model call. Agents: {allowed}.",
            _SIGNAL_PARAMETERS,
        ),
    )
    return [
        Tool(name=name, description=description, parameters=parameters, fn=fn, retry="safe")
        for name, fn, description, parameters in table
    ]
