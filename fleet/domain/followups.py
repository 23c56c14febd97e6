"""Follow-ups an agent schedules in its own conversation (``schedule_followup``), pure rules.

A follow-up is not a task until it is due: then it is admitted into the conversation like any
submission (it takes its place in the queue then, so it never blocks the conversation while it
waits). It is keyed by the scheduling run's tool call, so a retried run schedules nothing twice,
and admitted under an idempotency key of its own, so it becomes one task whatever the number
of sweepers that find it due.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from fleet.errors import InputError

#: Most follow-ups a conversation may have pending at once.
MAX_PENDING = 10
#: The soonest (seconds) and the latest (30 days) a follow-up may be scheduled.
MIN_AFTER_S, MAX_AFTER_S = 1.0, 30 * 24 * 3600.0
#: The label a follow-up's task carries (the follow-up's id).
LABEL = "followup"


@dataclass(frozen=True, slots=True)
class Followup:
    """A follow-up as stored: where it goes, what it says, when."""

    id: str
    task_id: str
    conversation_id: str
    tenant: str
    deployment: str
    scope: str
    key: str
    input: str
    due_at: datetime
    status: str = "pending"
    labels: dict[str, str] = field(default_factory=dict)
    caller: str | None = None


def check_after(seconds: float) -> float:
    """``after`` within bounds; InputError naming the value otherwise."""
    if not MIN_AFTER_S <= seconds <= MAX_AFTER_S:
        raise InputError(
            f"after must be from {MIN_AFTER_S:g}s to {MAX_AFTER_S / 86400:g} days, "
            f"got {seconds:g}s",
            field="after",
        )
    return seconds


def full_message(pending: int) -> str | None:
    """Why one more follow-up is refused (``MAX_PENDING`` pending already), or None."""
    if pending >= MAX_PENDING:
        return (
            f"this conversation has {pending} follow-ups pending already (at most "
            f"{MAX_PENDING}); wait for one to arrive, or fold this into one of them"
        )
    return None


def admission_key(followup_id: str) -> str:
    """The idempotency key a due follow-up is admitted under (one task, however often)."""
    return f"followup:{followup_id}"


__all__ = [
    "LABEL",
    "MAX_AFTER_S",
    "MAX_PENDING",
    "MIN_AFTER_S",
    "admission_key",
    "check_after",
    "full_message",
]
