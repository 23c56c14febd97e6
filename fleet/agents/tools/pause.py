"""``pause(duration)``: the run stops for a while holding no worker and goes on afterwards with
everything it had. Its task is ``waiting`` (a ``time`` wait whose deadline is the pause's end);
the sweeper, or a wake-up left for a short pause, resumes it on any worker, and the call runs
again and finds the pause over. An interrupt or a cancel ends a pause early. Nothing is
journaled before the pause ends, so a retried run pauses for the same wait (the first call's
deadline holds): safe to run again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleet.agents.tools.base import Park, Tool, ToolContext, ToolError
from fleet.config.base import parse_duration
from fleet.constants import PAUSE_TOOL
from fleet.domain import waits as rules
from fleet.errors import FleetError

if TYPE_CHECKING:
    from fleet.agents.ports import Waits

NAME = PAUSE_TOOL

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "duration": {
            "type": "string",
            "description": "How long: '30s', '15m', '2h' (at least 1s, at most 24h).",
        },
    },
    "required": ["duration"],
    "additionalProperties": False,
}


def tool(port: Waits) -> Tool:
    """The tool of one run, bound to its ``Waits`` port."""

    def pause(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            seconds = rules.check_pause(parse_duration(args.get("duration"), rules.MAX_PAUSE_S))
        except ValueError as exc:
            raise ToolError(f"duration: {exc}") from None
        except FleetError as exc:
            raise ToolError(exc.message) from None
        decided = port.decision(ctx.call_id)
        if decided is None:  # not asked yet, or resumed before its end: (still) waiting
            raise Park(rules.Request("time", ctx.call_id, NAME, dict(args), seconds))
        return rules.pause_result(seconds, decided)

    return Tool(
        name=NAME,
        description="Pause this run for a while without holding anything; it goes on "
        "afterwards where it stopped (a newer message or a cancel ends the pause early).",
        parameters=_PARAMETERS,
        fn=pause,
        retry="safe",
    )
