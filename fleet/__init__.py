"""fleet: run LLM agents as a horizontally scaled worker fleet.

What a user imports: the Python SDK (``Fleet``, one ``Conversation`` per conversation) to run
agents from Python, and the ``tool`` decorator and ``ToolContext`` for writing Python tools.
"""

from typing import TYPE_CHECKING, Any

from fleet.errors import FleetError
from fleet.version import __version__

if TYPE_CHECKING:
    from fleet.agents.tools import ToolContext, ToolError, tool
    from fleet.sdk import Conversation, Fleet, Message, TaskFailed, TaskHandle, TaskInfo

__all__ = [  # noqa: RUF022 (grouped by purpose, as dramatiq does)
    # the Python SDK
    "Conversation",
    "Fleet",
    "Message",
    "TaskHandle",
    "TaskInfo",
    # errors
    "FleetError",
    "TaskFailed",
    # writing tools
    "ToolContext",
    "ToolError",
    "tool",
    # the package
    "__version__",
]

#: Loaded on first use: a process that imports any part of fleet (the CLI, a worker, a tool
#: module) pays only for the parts it uses, not for the SDK or the models behind the tools.
_SDK = frozenset({"Conversation", "Fleet", "Message", "TaskFailed", "TaskHandle", "TaskInfo"})
_TOOLS = frozenset({"ToolContext", "ToolError", "tool"})


def __getattr__(name: str) -> Any:
    if name in _SDK:
        from fleet import sdk

        return getattr(sdk, name)
    if name in _TOOLS:
        from fleet.agents import tools

        return getattr(tools, name)
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")
