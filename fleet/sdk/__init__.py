"""The Python SDK: one ``Conversation`` object is one conversation, continued by each run.

``Fleet`` (:mod:`fleet.sdk.fleet`) runs embedded, admits into a fleet, or talks to a
``fleet serve`` through :mod:`fleet.sdk.client`, the one HTTP client (the CLI's ``--server``
uses it too); task handles and what they read are :mod:`fleet.sdk.tasks`'.
"""

from fleet.sdk.fleet import Conversation, Fleet
from fleet.sdk.tasks import Message, TaskFailed, TaskHandle, TaskInfo, TextChunk

__all__ = ["Conversation", "Fleet", "Message", "TaskFailed", "TaskHandle", "TaskInfo", "TextChunk"]
