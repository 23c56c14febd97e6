"""Tables of waiting without a worker: what waiting tasks wait for (tool approvals, delegated
tasks, events), the events sent for them, and the follow-ups agents scheduled
(``schedule_followup``).

Re-exported by ``fleet.store.schema`` (``s.waits``, ``s.inbound_events``, ``s.followups``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import (
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
)

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
    # event: the name and key waited for; once one arrived, its id (in ``inbound_events``) and
    # its data (redacted), which the resumed run's tool call returns.
    Column("event", String(200)),
    Column("event_key", String(500)),
    Column("event_id", String(200)),
    Column("data", JSONType),
    UniqueConstraint("task_id", "call_id"),
    # What is pending (the approvals list, the delegate watch): few rows at any time.
    partial_index("ix_waits_pending", "task_id", where="status = 'pending'"),
    partial_index("ix_waits_target", "target_task_id", where="target_task_id IS NOT NULL"),
    partial_index(
        "ix_waits_event",
        "tenant",
        "event",
        "event_key",
        where="kind = 'event' AND status = 'pending'",
    ),
)

#: An event sent to the fleet (``POST /v1/events``, ``fleet events send``, a trigger's
#: ``[event]``): it resolved the waits pending for it when it came (``resolved``), and is kept
#: for the lookback window for waits that start after it. Ids are unique per tenant.
inbound_events = Table(
    "inbound_events",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    tenant(),
    Column("event_id", String(200), nullable=False),
    # The scope whose waits it reaches; NULL: every scope of the tenant (an operator's).
    Column("scope", String(200)),
    Column("name", String(200), nullable=False),
    Column("key", String(500), nullable=False),
    Column("data", JSONType),
    Column("sender", String(200)),
    Column("resolved", Integer, nullable=False, default=0),
    stamp("received_at"),
    UniqueConstraint("tenant", "event_id"),
    Index("ix_inbound_events_match", "tenant", "name", "key", "received_at"),
    Index("ix_inbound_events_received", "received_at"),
)

#: A follow-up an agent scheduled in its conversation (``schedule_followup``), admitted as a task
#: of that conversation only when due (so it never blocks the conversation meanwhile), once:
#: keyed by the scheduling task's tool call, admitted under an idempotency key of its own.
followups = Table(
    "followups",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("call_id", String(200), nullable=False),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    tenant(),
    Column("deployment", String(100), nullable=False),
    Column("scope", String(200), nullable=False),
    Column("conversation_key", String(200), nullable=False),
    Column("input", Text, nullable=False),
    Column("labels", JSONType, nullable=False, default=dict),
    Column("caller", String(200)),
    Column("due_at", UTCDateTime(), nullable=False),
    # ``pending`` until admitted (``admitted``, with the task) or dropped (``cancelled``).
    Column("status", String(16), nullable=False, default="pending"),
    Column("admitted_task_id", Uuid),
    stamp("created_at"),
    UniqueConstraint("task_id", "call_id"),
    partial_index("ix_followups_due", "due_at", where="status = 'pending'"),
    partial_index("ix_followups_pending", "conversation_id", where="status = 'pending'"),
)
