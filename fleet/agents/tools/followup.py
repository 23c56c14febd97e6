"""``schedule_followup(after, input)``: the agent comes back to its conversation later, holding
nothing meanwhile. The port stores the follow-up once per tool call (a retried run schedules
nothing twice: safe to run again); it is admitted as a task of the conversation when due."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleet.agents.tools.base import Tool, ToolContext, ToolError
from fleet.config.base import parse_duration
from fleet.constants import FOLLOWUP_TOOL
from fleet.domain import followups as rules
from fleet.errors import FleetError

if TYPE_CHECKING:
    from fleet.agents.ports import Followups

NAME = FOLLOWUP_TOOL

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "after": {
            "type": "string",
            "description": "When, from now: '90s', '15m', '2h', '1d' (at least 1s, at most 30d).",
        },
        "input": {
            "type": "string",
            "description": "The message this conversation gets then (what to do or check).",
        },
    },
    "required": ["after", "input"],
    "additionalProperties": False,
}


def tool(port: Followups) -> Tool:
    """The tool of one run, bound to its port."""

    def schedule_followup(args: dict[str, Any], ctx: ToolContext) -> str:
        after, text = args.get("after"), args.get("input")
        if not isinstance(text, str) or not text.strip():
            raise ToolError("input must be the non-empty text of the follow-up")
        try:
            seconds = rules.check_after(parse_duration(after, rules.MAX_AFTER_S))
        except ValueError as exc:
            raise ToolError(f"after: {exc}") from None
        except FleetError as exc:
            raise ToolError(exc.message) from None
        try:
            found = port.schedule(seconds, text, call_id=ctx.call_id)
        except FleetError as exc:  # too many pending: the model may fold it into another
            raise ToolError(exc.message) from None
        return (
            f"scheduled follow-up {found.id}: this conversation gets it as a new message at "
            f"{found.due_at.isoformat(timespec='seconds')}"
        )

    return Tool(
        name=NAME,
        description="Come back to this conversation later: the input arrives as a new message "
        "after the given time (nothing is held meanwhile).",
        parameters=_PARAMETERS,
        fn=schedule_followup,
        retry="safe",
    )
