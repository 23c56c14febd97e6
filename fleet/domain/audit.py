"""The audit log: who did what to which object, when, from where, and how it went (pure).

Every action that changes what fleet holds or does is one entry: cancels, signals, approvals,
resets, deletes, prunes, erasures and exports, bulk jobs, schedules added and removed, memory
written, events sent, a key refused. An entry names its actor (an operator's or caller's name,
``cli:<OS user>``, ``api`` for an open API), never a key; a resource only by digest (resource ids
are often e-mail addresses); and holds no text of what it acted on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleet.domain.rights import digest

#: A flood of refused keys from one address is one entry per this many seconds (with a count).
REFUSALS_EVERY_S = 60.0
#: Most entries one listing returns.
MAX_LISTED = 1000

#: What the API's operations and the UI's forms do, as audit actions.
ACTIONS: Mapping[str, str] = {
    "CancelTask": "task.cancel",
    "SignalTask": "task.signal",
    "DecideApproval": "approval.decide",
    "SendEvent": "event.send",
    "BulkTasks": "bulk.start",
    "ResetConversation": "conversation.reset",
    "DeleteConversation": "conversation.delete",
    "PruneConversations": "conversation.prune",
    "SetMemoryBlock": "memory.set",
    "CreateSchedule": "schedule.add",
    "DeleteSchedule": "schedule.remove",
    "ExportResource": "resource.export",
    "EraseResource": "resource.erase",
    "ExportConversation": "conversation.export",
    "EraseConversation": "conversation.erase",
    "POST /ui/tasks/{task_id}/cancel": "task.cancel",
    "POST /ui/conversations/{conversation_id}/reset": "conversation.reset",
    "POST /ui/failures/retry": "bulk.start",
    "POST /ui/failures/cancel": "bulk.start",
    "POST /ui/tasks/{task_id}/approvals/{approval_id}": "approval.decide",
}
#: A submission in the ``interrupt`` queue mode that stopped a running task.
INTERRUPT = "task.interrupt"
#: A request refused for its key (401), rate-limited per address.
KEY_REFUSED = "key.refused"

#: Path parameters that name the object acted on, in the order looked for.
OBJECT_PARAMS = (
    "task_id",
    "id",
    "conversationKey",
    "conversation_key",
    "conversation_id",
    "name",
    "block",
    "job_id",
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One audit entry (``tenant`` None: no tenant's, e.g. a refused key)."""

    at: datetime
    actor: str
    action: str
    outcome: str
    tenant: str | None = None
    object: str | None = None
    address: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def outcome_of(status: int) -> str:
    """``ok``, ``refused <status>`` (4xx: nothing done) or ``failed <status>``."""
    if status < 400:
        return "ok"
    return f"refused {status}" if status < 500 else f"failed {status}"


def resource_object(tenant: str, resource: str) -> str:
    """A resource as an entry names it: by digest, never its id."""
    return f"resource:{digest(tenant, resource)[:32]}"


def object_of(params: Mapping[str, Any], tenant: str | None) -> str | None:
    """The object a request's path names (a resource by digest)."""
    if "resource" in params:
        return resource_object(tenant or "default", str(params["resource"]))
    for name in OBJECT_PARAMS:
        if name in params:
            return str(params[name])[:300]
    return None


class RefusalGate:
    """One entry per address per ``every_s`` for refused keys; counts those let go between."""

    def __init__(self, every_s: float = REFUSALS_EVERY_S, addresses: int = 10_000) -> None:
        self.every_s = every_s
        self.addresses = addresses
        self._last: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def let(self, address: str, now: float) -> int | None:
        """None: not now (counted); else how many refusals from ``address`` this entry stands
        for (itself and those counted since the last)."""
        with self._lock:
            last = self._last.get(address)
            if last is not None and now - last[0] < self.every_s:
                self._last[address] = (last[0], last[1] + 1)
                return None
            if len(self._last) >= self.addresses:
                self._last.clear()  # a spread-out flood: forget, rather than grow
            self._last[address] = (now, 0)
            return 1 + (last[1] if last is not None else 0)
