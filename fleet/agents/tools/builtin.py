"""Built-in tools: small, side-effect free, useful in tests and demos."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from fleet.agents.tools.base import Tool, ToolContext, ToolError

#: ``wait`` refuses to sleep longer than this (seconds).
MAX_WAIT_S = 60.0


def _current_time(args: dict[str, Any], ctx: ToolContext) -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _wait(args: dict[str, Any], ctx: ToolContext) -> str:
    seconds = args.get("seconds")
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not 0 <= seconds <= MAX_WAIT_S
    ):
        raise ToolError(f"seconds must be a number from 0 to {MAX_WAIT_S:g}, got {seconds!r}")
    stop = threading.Event()
    deadline = float(seconds)
    step = 0.05
    waited = 0.0
    while waited < deadline and not ctx.should_stop():
        stop.wait(min(step, deadline - waited))
        waited += step
    return f"waited {seconds}s"


current_time = Tool(
    name="current_time",
    description="The current date and time in UTC (ISO 8601).",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    fn=_current_time,
)

wait = Tool(
    name="wait",
    description="Wait the given number of seconds (stops early if the run is cancelled).",
    parameters={
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S}},
        "required": ["seconds"],
        "additionalProperties": False,
    },
    fn=_wait,
)
