"""fleet: run LLM agents as a horizontally scaled worker fleet.

What a user imports: the ``tool`` decorator and ``ToolContext`` for writing Python tools.
"""

from fleet.agents.tools import ToolContext, ToolError, tool

__version__ = "0.1.0"

__all__ = [
    # writing tools
    "ToolContext",
    "ToolError",
    "__version__",
    "tool",
]
