"""Tools an agent may be given by name in ``config/agents/*.toml`` (``tools = [...]``)."""

from __future__ import annotations

from fleet.agents.tools.base import Tool, ToolContext, ToolError
from fleet.agents.tools.builtin import current_time, wait

__all__ = ["BUILTIN_TOOLS", "Tool", "ToolContext", "ToolError"]

#: Every tool a config may name.
BUILTIN_TOOLS: dict[str, Tool] = {tool.name: tool for tool in (current_time, wait)}
