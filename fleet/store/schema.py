"""SQLAlchemy models: the one schema for PostgreSQL and SQLite (Alembic migrates it).

Conversations, tasks, runs, messages and traces are here; memory's tables are in
``schema_memory``, delegations' and deliveries' in ``schema_delivery``, the base and column types
in ``schema_types``. This module re-exports them all and names every Core table (``s.tasks``).
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from fleet.store.schema_delivery import Delegation, Delivery, PushConfig
from fleet.store.schema_memory import (
    MemoryBlock,
    MemoryBlockVersion,
    MessageEmbedding,
    Note,
    NoteOperation,
    Observation,
    WorkingMemory,
    WorkingMemoryOperation,
)
from fleet.store.schema_types import (
    Base,
    BigId,
    FloatArray,
    JSONType,
    UTCDateTime,
    partial_index,
    utcnow,
)

_ACTIVE = "status IN ('leased', 'running')"
_CLAIMABLE = "status IN ('queued', 'interrupted')"
_UNFINISHED = "status IN ('queued', 'interrupted', 'leased', 'running')"
TASK_STATUSES = (
    "queued",
    "leased",
    "running",
    "interrupted",
    "succeeded",
    "failed",
    "cancelled",
    "superseded",
)


class Conversation(Base):
    """Identity (deployment, tenant, scope, key), reset generation and the per-conversation seq
    counter."""

    __tablename__ = "conversations"
    __table_args__ = (UniqueConstraint("deployment", "tenant", "scope", "key"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    deployment: Mapped[str] = mapped_column(String(100))
    #: The tenant whose wall it lies within (every read and write of it names the tenant).
    tenant: Mapped[str] = mapped_column(String(63), default="default", server_default="default")
    scope: Mapped[str] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(String(200))
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: The last seq handed out; admission bumps it under the row's lock.
    last_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ConversationTombstone(Base):
    """A deleted conversation's identity: a later submission with its key starts fresh and is
    told so."""

    __tablename__ = "conversation_tombstones"

    deployment: Mapped[str] = mapped_column(String(100), primary_key=True)
    tenant: Mapped[str] = mapped_column(
        String(63), primary_key=True, default="default", server_default="default"
    )
    scope: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    deleted_at: Mapped[datetime] = mapped_column()
    #: Who deleted it (an operator caller's name, ``cli``).
    deleted_by: Mapped[str] = mapped_column(String(200))
    #: How many tasks and messages went with it.
    tasks: Mapped[int] = mapped_column(Integer, default=0)
    messages: Mapped[int] = mapped_column(Integer, default=0)


class Task(Base):
    """A unit of submitted work; at most one per conversation is leased/running (partial index)."""

    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq"),
        CheckConstraint(
            "status IN (" + ", ".join(f"'{s}'" for s in TASK_STATUSES) + ")", name="status"
        ),
        # Invariant 1: one leased/running task per conversation, enforced by the store.
        partial_index(
            "uq_tasks_one_active",
            "conversation_id",
            where=_ACTIVE,
            unique=True,
        ),
        # The sweeper's scan for due work whose wake-up was lost.
        partial_index(
            "ix_tasks_claimable_due",
            "not_before",
            where=_CLAIMABLE,
        ),
        Index("ix_tasks_listing", "deployment", "scope", "created_at"),
        # The operator UI's last-hour throughput and failures: a range of recent finishes, not
        # a scan of every task ever finished.
        Index("ix_tasks_finished_at", "finished_at"),
        # A conversation's head (lowest unfinished seq) in one index probe, however many
        # finished tasks the conversation has (a singleton's grow without end).
        # Finished tasks whose inbox still holds messages (the sweeper requeues them): few.
        partial_index(
            "ix_tasks_inbox",
            "id",
            where="inbox > 0",
        ),
        # Ended tasks whose push notifications are not journaled yet (the sweeper's look): few.
        partial_index(
            "ix_tasks_push_pending",
            "id",
            where="push_pending",
        ),
        partial_index(
            "ix_tasks_unfinished",
            "conversation_id",
            "seq",
            where=_UNFINISHED,
        ),
        # A tenant's unfinished tasks (its queued quota, ``fleet tenants``): few per tenant.
        partial_index(
            "ix_tasks_tenant_unfinished",
            "tenant",
            "status",
            where=_UNFINISHED,
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    deployment: Mapped[str] = mapped_column(String(100))
    #: The conversation's tenant (denormalized: quotas, fairness and walls read it per task).
    tenant: Mapped[str] = mapped_column(String(63), default="default", server_default="default")
    #: Among its tenant's due work, higher runs first (0-9).
    priority: Mapped[int] = mapped_column(SmallInteger, default=5, server_default="5")
    scope: Mapped[str] = mapped_column(String(200))
    #: The conversation's key (denormalized so task reads need no join).
    conversation_key: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    #: The input as a list of parts (``{"type": "text", "text": …}``); collect appends to it.
    input: Mapped[Any] = mapped_column(JSONType)
    #: How many submissions this task holds (collect merges raise it).
    submissions: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    input_bytes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    not_before: Mapped[datetime] = mapped_column()
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    max_attempts: Mapped[int] = mapped_column(Integer, default=3, server_default="3")
    #: Fencing number: bumped by every claim; every write of a run is conditioned on it.
    fence: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    cancel_requested: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=text("false")
    )
    #: ``interrupt`` mode: a newer submission asks the run to report and stop.
    interrupt_requested: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=text("false")
    )
    #: Messages waiting in the run's inbox (steer, signals); the settle sees it and requeues them.
    inbox: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: An A2A push-notification config was set whose delivery is not journaled yet: the settle
    #: returns it (no read of the configs for tasks without one), the sweeper journals the
    #: deliveries of ended tasks that still carry it (a worker lost after its settle).
    push_pending: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    worker: Mapped[str | None] = mapped_column(String(200))
    #: The caller that submitted it (API caller, trigger, A2A caller), for the authorize policy.
    caller: Mapped[str | None] = mapped_column(String(200))
    #: Who or what the work is about across conversations (a user id): ``resource`` recall and
    #: working memory reach its other conversations, within the same scope.
    resource_id: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    leased_at: Mapped[datetime | None] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[Any | None] = mapped_column(JSONType)


class IdempotencyKey(Base):
    """Every idempotency key seen in a scope and the task it produced (or was merged into)."""

    __tablename__ = "idempotency_keys"

    tenant: Mapped[str] = mapped_column(
        String(63), primary_key=True, default="default", server_default="default"
    )
    scope: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    task_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Run(Base):
    """One execution attempt of a task: frozen context snapshot, usage and outcome."""

    __tablename__ = "runs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    task_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    attempt: Mapped[int] = mapped_column(Integer)
    fence: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(200))
    #: The prompt exactly as the first model step saw it, plus what was injected and dropped.
    context: Mapped[dict[str, Any]] = mapped_column()
    usage: Mapped[dict[str, Any]] = mapped_column(default=dict)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()
    #: ``host:pid`` of the worker process that ran it.
    worker: Mapped[str | None] = mapped_column(String(200))
    #: What the run did besides its steps: journal steps it replayed, tool results it shortened.
    details: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default=text("'{}'"))


class Message(Base):
    """A conversation message: accepted user input or an assistant reply (with delivery status)."""

    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_history", "conversation_id", "generation", "id"),
        # Retention: the messages said before a cutoff, oldest first.
        Index("ix_messages_created_at", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    task_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("tasks.id", ondelete="SET NULL"))
    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    #: ``accepted`` (user input), ``sent`` (reply returned), ``pending`` / ``unknown`` (journal).
    delivery: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Trace(Base):
    """A recorded step of a run (one model call or one tool call): the run's step journal."""

    __tablename__ = "traces"
    __table_args__ = (UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    task_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    step: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    input: Mapped[Any | None] = mapped_column(JSONType)
    output: Mapped[Any | None] = mapped_column(JSONType)
    error: Mapped[str | None] = mapped_column(Text)
    usage: Mapped[dict[str, Any]] = mapped_column(default=dict)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    started_at: Mapped[datetime] = mapped_column()
    duration_ms: Mapped[float] = mapped_column()
    #: ``finished``, or ``started``: a tool call journaled before it ran (in flight until its
    #: result replaces the row); a retry that finds it so knows the call may have had its effect.
    status: Mapped[str] = mapped_column(String(16), default="finished", server_default="finished")
    #: The model's id for a tool call (ties a call's result to the step that asked for it).
    call_id: Mapped[str | None] = mapped_column(String(200))
    #: Copied from an earlier attempt's journal instead of being computed again.
    replayed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))


class TokenUsage(Base):
    """The token ledger: one row per model step a run made (not a replayed one), with its
    tenant and UTC day, for tenants' budgets. No foreign keys: deleting a conversation does
    not give its tokens back."""

    __tablename__ = "token_usage"
    __table_args__ = (
        Index("ix_token_usage_tenant_day", "tenant", "day"),
        Index("ix_token_usage_task", "task_id"),
    )

    run_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    tenant: Mapped[str] = mapped_column(String(63))
    #: The UTC day the step was made (budgets reset at 00:00 UTC).
    day: Mapped[date] = mapped_column(Date)
    #: Prompt and completion tokens as the model reported them.
    tokens: Mapped[int] = mapped_column(BigInteger)
    #: What they cost, in millionths of ``[prices]``' unit (0: the model has no price).
    cost_micros: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class QuotaRefusal(Base):
    """Embedded mode's count of submissions refused by a tenant's quota, per UTC day (a fleet
    counts them in Redis, where a flood of refusals costs no database write)."""

    __tablename__ = "quota_refusals"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(63), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger, default=0)


class InboxMessage(Base):
    """A message for a running run, delivered at its next step boundary (steer, signals).

    ``pending`` until a step boundary takes it (``delivered``, journaled as an ``inbox`` step of
    that run) or the run ends first and it becomes a task of its own (``requeued``), or is
    dropped (``cancelled``, with ``error``) when the conversation was reset meanwhile.
    """

    __tablename__ = "run_inbox"
    __table_args__ = (Index("ix_run_inbox_task_status", "task_id", "status"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    #: ``steer`` (a submission), ``signal`` (SignalTask, signal_agent).
    source: Mapped[str] = mapped_column(String(16))
    input: Mapped[Any] = mapped_column(JSONType)
    input_bytes: Mapped[int] = mapped_column(Integer, default=0)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    caller: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    #: The run's step that delivered it (its ``inbox`` journal step).
    step: Mapped[int | None] = mapped_column(Integer)
    #: Why it was cancelled (its run's generation is no longer the conversation's).
    error: Mapped[str | None] = mapped_column(Text)
    #: The task it became when the run ended before taking it.
    requeued_task_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("tasks.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column()


#: Core tables for the store's statements (the ORM classes above and in schema_memory and
#: schema_delivery define them).
conversations = cast(Table, Conversation.__table__)
tasks = cast(Table, Task.__table__)
idempotency_keys = cast(Table, IdempotencyKey.__table__)
runs = cast(Table, Run.__table__)
messages = cast(Table, Message.__table__)
traces = cast(Table, Trace.__table__)
memory_blocks = cast(Table, MemoryBlock.__table__)
memory_block_versions = cast(Table, MemoryBlockVersion.__table__)
notes = cast(Table, Note.__table__)
note_operations = cast(Table, NoteOperation.__table__)
run_inbox = cast(Table, InboxMessage.__table__)
message_embeddings = cast(Table, MessageEmbedding.__table__)
working_memory = cast(Table, WorkingMemory.__table__)
working_memory_operations = cast(Table, WorkingMemoryOperation.__table__)
observations = cast(Table, Observation.__table__)
delegations = cast(Table, Delegation.__table__)
deliveries = cast(Table, Delivery.__table__)
push_configs = cast(Table, PushConfig.__table__)
conversation_tombstones = cast(Table, ConversationTombstone.__table__)
token_usage = cast(Table, TokenUsage.__table__)
quota_refusals = cast(Table, QuotaRefusal.__table__)

__all__ = [
    "TASK_STATUSES",
    "Base",
    "BigId",
    "Conversation",
    "ConversationTombstone",
    "Delegation",
    "Delivery",
    "FloatArray",
    "IdempotencyKey",
    "InboxMessage",
    "JSONType",
    "MemoryBlock",
    "MemoryBlockVersion",
    "Message",
    "MessageEmbedding",
    "Note",
    "NoteOperation",
    "Observation",
    "PushConfig",
    "QuotaRefusal",
    "Run",
    "Task",
    "TokenUsage",
    "Trace",
    "UTCDateTime",
    "WorkingMemory",
    "WorkingMemoryOperation",
    "conversation_tombstones",
    "conversations",
    "delegations",
    "deliveries",
    "idempotency_keys",
    "memory_block_versions",
    "memory_blocks",
    "message_embeddings",
    "messages",
    "note_operations",
    "notes",
    "observations",
    "push_configs",
    "quota_refusals",
    "run_inbox",
    "runs",
    "tasks",
    "token_usage",
    "traces",
    "utcnow",
    "working_memory",
    "working_memory_operations",
]
