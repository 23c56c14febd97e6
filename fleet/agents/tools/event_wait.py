"""``wait_for_event(event, key, timeout)``: the run stops, holding no worker, until an event of
that name and key arrives in its tenant and scope, and goes on with the event's data as the
call's result; at the timeout it goes on told that none came. Its task is ``waiting`` (an
``event`` wait whose deadline is the timeout). Nothing is journaled before the wait ends, so a
retried run waits for the same wait (the first call's deadline holds): safe to run again.

The agent's entry lists the event names it may wait for and the longest timeout
(``{ tool = "wait_for_event", events = ["payment.*"], max_timeout = "1d" }``); the data reaches
the model marked as outside data (``fleet.domain.event_waits``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleet.agents.tools.base import Park, Tool, ToolContext, ToolError
from fleet.config.base import parse_duration
from fleet.constants import EVENT_WAIT_TOOL
from fleet.domain import event_waits as rules
from fleet.domain import waits
from fleet.errors import FleetError

if TYPE_CHECKING:
    from fleet.agents.ports import Waits

NAME = EVENT_WAIT_TOOL


def _parameters(globs: Sequence[str], longest: float) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "event": {
                "type": "string",
                "description": "The event's name; one of: " + ", ".join(globs),
            },
            "key": {
                "type": "string",
                "description": "Which one it is about (an order id, a job id, an e-mail thread).",
            },
            "timeout": {
                "type": "string",
                "description": "How long to wait at most: '30s', '15m', '2h' (at most "
                f"{longest:g}s; default the most).",
            },
        },
        "required": ["event", "key"],
        "additionalProperties": False,
    }


def tool(port: Waits, globs: Sequence[str], longest: float) -> Tool:
    """The tool of one run, bound to its ``Waits`` port and the agent's entry."""

    def wait_for_event(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            name = rules.check_name(args.get("event"))
            key = rules.check_key(args.get("key"))
            asked = args.get("timeout")
            seconds = longest if asked is None else parse_duration(asked)
            seconds = rules.check_timeout(seconds, longest)
        except ValueError as exc:
            raise ToolError(f"timeout: {exc}") from None
        except FleetError as exc:
            raise ToolError(exc.message) from None
        if not rules.allowed(name, globs):
            raise ToolError(
                f"event {name!r} is not one this agent may wait for: {', '.join(globs)}"
            )
        decided = port.decision(ctx.call_id)
        if decided is None:  # not asked yet, or resumed before it ended: (still) waiting
            raise Park(
                waits.Request("event", ctx.call_id, NAME, dict(args), seconds, event=name, key=key)
            )
        if decided.status == "done":
            return rules.arrived_result(name, key, decided.data)
        return rules.ended_result(name, key, seconds, decided.status)

    return Tool(
        name=NAME,
        description="Wait, holding nothing, until an event from outside arrives (a payment "
        "cleared, a job finished, a reply came); the result is the event's data, or that none "
        "came in time.",
        parameters=_parameters(globs, longest),
        fn=wait_for_event,
        retry="safe",
    )
