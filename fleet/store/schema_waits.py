"""The table of what waiting tasks wait for: tool approvals and delegated tasks.

Re-exported by ``fleet.store.schema`` (``s.waits``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import Boolean, Column, ForeignKey, String, Table, Text, UniqueConstraint, Uuid

from fleet.store.schema_types import JSONType, UTCDateTime, metadata, partial_index, stamp, tenant

#: One wait of a task's run, keyed by the tool call it belongs to (so a run retried before it
#: parked asks for the same one, never a second). ``approval``: a person decides on the call
#: (``pending`` → ``approved`` / ``rejected`` / ``expired`` / ``interrupted`` / ``cancelled``);
#: ``delegate``: the run waits for ``target_task_id`` (``call_agent``) until it ends or
#: ``expires_at`` passes. The task is made due (``not_before``) when none of its waits is
#: pending any more, or at the earliest ``expires_at``.
waits = Table(
    "waits",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    tenant(),
    Column("kind", String(16), nullable=False),
    Column("call_id", String(200), nullable=False),
    # approval: the tool and its arguments as stored (redacted) and shown to the approver.
    Column("tool", String(200), nullable=False),
    Column("arguments", JSONType, nullable=False, default=dict),
    # Redaction changed the arguments the model gave (the approver sees the redacted ones).
    Column("redacted", Boolean, nullable=False, default=False),
    Column("status", String(16), nullable=False, default="pending"),
    stamp("requested_at"),
    Column("expires_at", UTCDateTime(), nullable=False),
    # Who decided (a caller's name, ``operator``, ``a2a:<caller>``) and why (a person's words).
    Column("decided_by", String(200)),
    Column("reason", Text),
    Column("decided_at", UTCDateTime()),
    # delegate: the task waited for.
    Column("target_task_id", Uuid),
    UniqueConstraint("task_id", "call_id"),
    # What is pending (the approvals list, the delegate watch): few rows at any time.
    partial_index("ix_waits_pending", "task_id", where="status = 'pending'"),
    partial_index("ix_waits_target", "target_task_id", where="target_task_id IS NOT NULL"),
)
