"""Built-in tools: small, side-effect free, useful in tests and demos."""

from __future__ import annotations

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
    if ctx.sleep(float(seconds)):
        return f"stopped early: the run is stopping (asked to wait {seconds}s)"
    return f"waited {seconds}s"


current_time = Tool(
    name="current_time",
    description="The current date and time in UTC (ISO 8601).",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    fn=_current_time,
    retry="safe",
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
    retry="safe",
)

#: Every built-in tool, by the name a config gives it.
BUILTIN_TOOLS: dict[str, Tool] = {t.name: t for t in (current_time, wait)}
