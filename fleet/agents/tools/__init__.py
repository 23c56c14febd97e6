"""Tools an agent may be given in ``config/agents/*.toml`` (``tools = [...]``).

Built-ins by name, Python functions as ``module:function``; see ``toolbox`` for how an agent's
tools are put together and ``executor`` for how one call runs.
"""

from __future__ import annotations

from fleet.agents.tools.base import RetryPolicy, Tool, ToolContext, ToolError
from fleet.agents.tools.builtin import BUILTIN_TOOLS
from fleet.agents.tools.python import ToolLoadError, tool

__all__ = [
    "BUILTIN_TOOLS",
    "RetryPolicy",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolLoadError",
    "tool",
]
