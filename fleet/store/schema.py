"""SQLAlchemy models: the one schema for PostgreSQL and SQLite (Alembic migrates it)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, REAL
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python everywhere; SQLite stores naive UTC text."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use datetime.now(UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONType = JSON().with_variant(JSONB(), "postgresql")
#: 64-bit ids on PostgreSQL; INTEGER PRIMARY KEY (the rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")
#: A vector as PostgreSQL ``real[]`` (pgvector casts it to ``vector``); unused JSON elsewhere.
FloatArray = JSON().with_variant(ARRAY(REAL()), "postgresql")

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


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=_NAMING)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSONType}


def _now() -> datetime:
    return datetime.now(UTC)


class Conversation(Base):
    """Identity (deployment, scope, key), reset generation and the per-conversation seq counter."""

    __tablename__ = "conversations"
    __table_args__ = (UniqueConstraint("deployment", "scope", "key"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    deployment: Mapped[str] = mapped_column(String(100))
    scope: Mapped[str] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(String(200))
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: The last seq handed out; admission bumps it under the row's lock.
    last_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(default=_now)
    updated_at: Mapped[datetime] = mapped_column(default=_now)


class ConversationTombstone(Base):
    """A deleted conversation's identity: a later submission with its key starts fresh and is
    told so."""

    __tablename__ = "conversation_tombstones"

    deployment: Mapped[str] = mapped_column(String(100), primary_key=True)
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
        Index(
            "uq_tasks_one_active",
            "conversation_id",
            unique=True,
            postgresql_where=text(_ACTIVE),
            sqlite_where=text(_ACTIVE),
        ),
        # The sweeper's scan for due work whose wake-up was lost.
        Index(
            "ix_tasks_claimable_due",
            "not_before",
            postgresql_where=text(_CLAIMABLE),
            sqlite_where=text(_CLAIMABLE),
        ),
        Index("ix_tasks_listing", "deployment", "scope", "created_at"),
        # A conversation's head (lowest unfinished seq) in one index probe, however many
        # finished tasks the conversation has (a singleton's grow without end).
        # Finished tasks whose inbox still holds messages (the sweeper requeues them): few.
        Index(
            "ix_tasks_inbox",
            "id",
            postgresql_where=text("inbox > 0"),
            sqlite_where=text("inbox > 0"),
        ),
        Index(
            "ix_tasks_unfinished",
            "conversation_id",
            "seq",
            postgresql_where=text(_UNFINISHED),
            sqlite_where=text(_UNFINISHED),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    deployment: Mapped[str] = mapped_column(String(100))
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
    worker: Mapped[str | None] = mapped_column(String(200))
    #: The caller that submitted it (API caller, trigger, A2A caller), for the authorize policy.
    caller: Mapped[str | None] = mapped_column(String(200))
    #: Who or what the work is about across conversations (a user id): ``resource`` recall and
    #: working memory reach its other conversations, within the same scope.
    resource_id: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=_now)
    leased_at: Mapped[datetime | None] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[Any | None] = mapped_column(JSONType)


class IdempotencyKey(Base):
    """Every idempotency key seen in a scope and the task it produced (or was merged into)."""

    __tablename__ = "idempotency_keys"

    scope: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    task_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=_now)


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
    started_at: Mapped[datetime] = mapped_column(default=_now)
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
    created_at: Mapped[datetime] = mapped_column(default=_now)


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


class MemoryBlock(Base):
    """Durable named text in a namespace; ``version`` bumps on every change."""

    __tablename__ = "memory_blocks"
    __table_args__ = (UniqueConstraint("namespace", "name"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    namespace: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(200), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    value: Mapped[str] = mapped_column(Text, default="")
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(default=_now)
    updated_at: Mapped[datetime] = mapped_column(default=_now)


class MemoryBlockVersion(Base):
    """Every value a block has had: who wrote it and when."""

    __tablename__ = "memory_block_versions"

    block_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("memory_blocks.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    #: ``user`` for people (``fleet memory set``), ``run:<id>`` for an agent's update.
    author: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=_now)
    #: The tool call that made this version (``<task>:<call>``): a retried call applies once.
    receipt: Mapped[str | None] = mapped_column(String(200))

    __table_args__ = (UniqueConstraint("block_id", "receipt"),)


class Note(Base):
    """Explicitly saved per-conversation text (the memory_* note tools)."""

    __tablename__ = "notes"
    __table_args__ = (UniqueConstraint("conversation_id", "key"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(String(128))
    body: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=_now)
    updated_at: Mapped[datetime] = mapped_column(default=_now)


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
    created_at: Mapped[datetime] = mapped_column(default=_now)
    delivered_at: Mapped[datetime | None] = mapped_column()


class NoteOperation(Base):
    """A receipt for a notes tool call, committed with its edit: a retried call applies once.

    It keeps what the call answered (metadata only, never the note's body).
    """

    __tablename__ = "note_operations"

    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    receipt: Mapped[str] = mapped_column(String(200), primary_key=True)
    op: Mapped[str] = mapped_column(String(16))
    key: Mapped[str] = mapped_column(String(128))
    outcome: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class MessageEmbedding(Base):
    """A stored message's embedding (recall): written after the message, off the hot path."""

    __tablename__ = "message_embeddings"
    __table_args__ = (
        Index("ix_message_embeddings_conversation", "conversation_id", "message_id"),
        Index("ix_message_embeddings_resource", "scope", "namespace", "resource_id", "message_id"),
    )

    message_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True
    )
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    generation: Mapped[int] = mapped_column(Integer)
    scope: Mapped[str] = mapped_column(String(200))
    namespace: Mapped[str] = mapped_column(String(100))
    resource_id: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: The embedder that made it (``local:wordllama-256``, ``openai:<model>``).
    model: Mapped[str] = mapped_column(String(200))
    #: float32 values, little-endian.
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    #: PostgreSQL: the same values as ``real[]``, for pgvector's in-database search (written
    #: whether or not the server has pgvector, so enabling it later finds every message);
    #: NULL on SQLite, whose sqlite-vec reads ``vector``.
    embedding: Mapped[list[float] | None] = mapped_column(FloatArray, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class WorkingMemory(Base):
    """Structured state an agent keeps for a conversation or a resource (working memory)."""

    __tablename__ = "working_memory"

    #: ``conversation:<id>`` or ``resource:<namespace>:<scope>:<resource id>``.
    key: Mapped[str] = mapped_column(String(500), primary_key=True)
    value: Mapped[Any] = mapped_column(JSONType)
    version: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=_now)
    #: ``run:<id>`` of the last writer.
    author: Mapped[str] = mapped_column(String(200))


class WorkingMemoryOperation(Base):
    """A receipt per applied working-memory patch: a retried call applies it once."""

    __tablename__ = "working_memory_operations"

    receipt: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(500))
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class Observation(Base):
    """Older history distilled by a model call: one per range of messages and level.

    Level 0 (an observation) covers messages ``from_message_id``..``to_message_id``; level 1 (a
    reflection) condenses level-0 observations covering that span. Journaled by range: asking
    again for the same range reads this row instead of calling the model.
    """

    __tablename__ = "observations"
    __table_args__ = (
        Index(
            "uq_observations_range",
            "conversation_id",
            "generation",
            "level",
            "from_message_id",
            "to_message_id",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    generation: Mapped[int] = mapped_column(Integer)
    level: Mapped[int] = mapped_column(Integer)
    from_message_id: Mapped[int] = mapped_column(BigInteger)
    to_message_id: Mapped[int] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class Delegation(Base):
    """A delegated task's place in its chain, and where its result goes (``start_agent``).

    Written in the admission transaction of the task it describes, so the task never runs
    without it. A ``start`` delegation is reported back once: ``reported_at`` is set when the
    task carrying its result was admitted (idempotently) into the caller's conversation.
    """

    __tablename__ = "delegations"
    __table_args__ = (
        # The sweeper's scan for started tasks whose result was not reported yet: few.
        Index(
            "ix_delegations_unreported",
            "task_id",
            postgresql_where=text("mode = 'start' AND reported_at IS NULL"),
            sqlite_where=text("mode = 'start' AND reported_at IS NULL"),
        ),
    )

    task_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    #: ``call`` (the caller waits), ``start`` (reported back), ``result`` (a report).
    mode: Mapped[str] = mapped_column(String(8))
    #: The task whose run delegated (None for a report).
    parent_task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    #: Conversations of the runs that delegated, root first: the depth is its length.
    chain: Mapped[Any] = mapped_column(JSONType)
    #: ``start``: the caller's conversation, labels and caller the result goes to.
    report_to: Mapped[Any | None] = mapped_column(JSONType)
    reported_at: Mapped[datetime | None] = mapped_column()
    #: The task that carried the result back (or the running task it was steered into).
    reported_task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class Delivery(Base):
    """The journal of one reply delivered to one place: ``pending → sent | failed | unknown``.

    Its id is the ``Idempotency-Key`` every attempt sends. An attempt starts only by a
    conditional update (``status = 'pending'`` and no live claim) that sets ``claim``; its
    outcome is written only under that claim, so nothing is sent again once ``sent`` is stored.
    """

    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("task_id", "target"),
        Index(
            "ix_deliveries_pending",
            "next_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    task_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    #: ``reply:<file>`` (a trigger's or deployment's ``[reply]``) or ``push:<config id>``.
    target: Mapped[str] = mapped_column(String(300))
    #: ``reply`` or ``push``.
    kind: Mapped[str] = mapped_column(String(16))
    #: Where it goes (rendered when the first attempt starts; never holds credentials).
    url: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    max_attempts: Mapped[int] = mapped_column(Integer)
    #: When the next attempt may start (pending only).
    next_at: Mapped[datetime | None] = mapped_column()
    #: The running attempt's token and until when it holds.
    claim: Mapped[str | None] = mapped_column(String(64))
    claimed_until: Mapped[datetime | None] = mapped_column()
    #: Every attempt: number, start, outcome, HTTP status, duration, error (redacted).
    journal: Mapped[Any] = mapped_column(JSONType, default=list)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=_now)
    updated_at: Mapped[datetime] = mapped_column(default=_now)


class PushConfig(Base):
    """An A2A push-notification config of a task: where its updates go, and the caller's token.

    The token and credentials are kept to be sent back (the caller checks them); they are
    shown only to the caller that set them and never journaled or logged.
    """

    __tablename__ = "push_configs"

    task_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    token: Mapped[str | None] = mapped_column(Text)
    #: ``{"scheme": …, "credentials": …}`` → ``Authorization: <scheme> <credentials>``.
    authentication: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(default=_now)


#: Core tables for the store's statements (the ORM classes above define them).
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
