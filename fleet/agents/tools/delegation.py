"""``call_agent`` and ``start_agent``: hand work to another deployment through the run's
delegation port.

``call_agent`` waits for the delegated task within the caller's step: bounded by the tool's
timeout and stopped like any tool. A stop that ends the caller's run (its cancel or interrupt,
or the timeout) cancels the delegated task; a stop that hands the run to another worker (a lost
lease, a run abandoned at shutdown) leaves it running, for the resumed call to wait for.
``start_agent`` returns the task's id at once; its result comes back later as a task of the
caller's conversation. Both admit one task per tool call (the port keys the admission by the
call), so a retried run waits for the same task instead of starting a second one: they are safe
to run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleet.agents.tools.base import Tool, ToolContext, ToolError
from fleet.constants import DELEGATION_POLL_S
from fleet.domain.delegation import Refused, call_result, started_result
from fleet.errors import FleetError

if TYPE_CHECKING:
    from fleet.agents.ports import Delegation

#: The names of the delegation tools (an agent's own tools may not take them).
NAMES = ("call_agent", "start_agent")


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


def tools(port: Delegation, delegates: Sequence[str]) -> list[Tool]:
    """The two delegation tools of one run, bound to its port."""

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

    allowed = ", ".join(delegates)
    return [
        Tool(
            name="call_agent",
            description=(
                "Hand a task to another agent and wait for its reply (a new conversation each "
                f"call). Agents: {allowed}."
            ),
            parameters=_parameters(delegates),
            fn=call_agent,
            retry="safe",
        ),
        Tool(
            name="start_agent",
            description=(
                "Start a task on another agent without waiting; its result arrives later in "
                f"this conversation as a new message. Agents: {allowed}."
            ),
            parameters=_parameters(delegates),
            fn=start_agent,
            retry="safe",
        ),
    ]
