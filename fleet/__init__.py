"""fleet: run LLM agents as a horizontally scaled worker fleet.

What a user imports: the Python SDK (``Fleet``, one ``Conversation`` per conversation) to run
agents from Python, and the ``tool`` decorator and ``ToolContext`` for writing Python tools.
"""

from fleet.agents.tools import ToolContext, ToolError, tool
from fleet.errors import FleetError
from fleet.sdk import Conversation, Fleet, Message, TaskFailed, TaskHandle, TaskInfo

__version__ = "0.1.0"

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
