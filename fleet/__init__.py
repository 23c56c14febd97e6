"""fleet: run LLM agents as a horizontally scaled worker fleet.

What a user imports: the Python SDK (``Fleet``, one ``Conversation`` per conversation) to run
agents from Python, and the ``tool`` decorator and ``ToolContext`` for writing Python tools.
"""

from typing import TYPE_CHECKING, Any

from fleet.agents.tools import ToolContext, ToolError, tool
from fleet.errors import FleetError
from fleet.version import __version__

if TYPE_CHECKING:
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

#: Loaded on first use: a tool module or the CLI that imports fleet does not pay for the SDK.
_SDK = frozenset({"Conversation", "Fleet", "Message", "TaskFailed", "TaskHandle", "TaskInfo"})


def __getattr__(name: str) -> Any:
    if name in _SDK:
        from fleet import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")
