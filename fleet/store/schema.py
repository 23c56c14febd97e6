"""The store's tables: the one schema for PostgreSQL and SQLite (Alembic migrates it).

SQLAlchemy Core tables on one ``MetaData`` (``schema_types.metadata``); the store's statements
use them as ``s.tasks.c.status``. Conversations, tasks, runs, messages and traces are here;
memory's tables are in ``schema_memory``, delegations' and deliveries' in ``schema_delivery``,
schedules' in ``schema_schedules``, the metadata and column types in ``schema_types``. This
module re-exports them all.
"""

from __future__ import annotations

import uuid

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    Double,
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

from fleet.store.schema_audit import audit_log
from fleet.store.schema_bulk import bulk_jobs
from fleet.store.schema_delivery import delegations, deliveries, push_configs
from fleet.store.schema_memory import (
    memory_block_versions,
    memory_blocks,
    message_embeddings,
    note_operations,
    notes,
    observations,
    working_memory,
    working_memory_operations,
)
from fleet.store.schema_rights import resource_tombstones
from fleet.store.schema_schedules import schedules
from fleet.store.schema_types import (
    BigId,
    FloatArray,
    JSONType,
    UTCDateTime,
    metadata,
    partial_index,
    stamp,
    tenant,
    utcnow,
)
from fleet.store.schema_waits import followups, inbound_events, waits

_ACTIVE = "status IN ('leased', 'running')"
_CLAIMABLE = "status IN ('queued', 'interrupted', 'waiting')"
#: An active task asked to stop (the stop watch's read; its index's predicate, word for word, so
#: the planner uses it whatever the plan).
STOP_ASKED = f"{_ACTIVE} AND (cancel_requested OR interrupt_requested)"
_UNFINISHED = "status IN ('queued', 'interrupted', 'waiting', 'leased', 'running')"
TASK_STATUSES = (
    "queued",
    "leased",
    "running",
    "interrupted",
    "succeeded",
    "failed",
    "cancelled",
    "superseded",
    "waiting",
)

#: Identity (deployment, tenant, scope, key), reset generation and the per-conversation seq
#: counter.
conversations = Table(
    "conversations",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    Column("deployment", String(100), nullable=False),
    # The tenant whose wall it lies within (every read and write of it names the tenant).
    tenant(),
    Column("scope", String(200), nullable=False),
    Column("key", String(200), nullable=False),
    Column("generation", Integer, nullable=False, default=0, server_default="0"),
    # The last seq handed out; admission bumps it under the row's lock.
    Column("last_seq", Integer, nullable=False, default=0, server_default="0"),
    stamp("created_at"),
    stamp("updated_at"),
    UniqueConstraint("deployment", "tenant", "scope", "key"),
)

#: A deleted conversation's identity: a later submission with its key starts fresh and is told
#: so.
conversation_tombstones = Table(
    "conversation_tombstones",
    metadata,
    Column("deployment", String(100), primary_key=True),
    tenant(primary_key=True),
    Column("scope", String(200), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("deleted_at", UTCDateTime(), nullable=False),
    # Who deleted it (an operator caller's name, ``cli``).
    Column("deleted_by", String(200), nullable=False),
    # How many tasks and messages went with it.
    Column("tasks", Integer, nullable=False, default=0),
    Column("messages", Integer, nullable=False, default=0),
)

#: A unit of submitted work; at most one per conversation is leased/running (partial index).
tasks = Table(
    "tasks",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("seq", Integer, nullable=False),
    Column("generation", Integer, nullable=False, default=0, server_default="0"),
    Column("deployment", String(100), nullable=False),
    # The conversation's tenant (denormalized: quotas, fairness and walls read it per task).
    tenant(),
    # Among its tenant's due work, higher runs first (0-9).
    Column("priority", SmallInteger, nullable=False, default=5, server_default="5"),
    Column("scope", String(200), nullable=False),
    # The conversation's key (denormalized so task reads need no join).
    Column("conversation_key", String(200), nullable=False),
    Column("status", String(16), nullable=False, default="queued"),
    # The input as a list of parts (``{"type": "text", "text": …}``); collect appends to it.
    Column("input", JSONType, nullable=False),
    # How many submissions this task holds (collect merges raise it).
    Column("submissions", Integer, nullable=False, default=1, server_default="1"),
    Column("input_bytes", Integer, nullable=False, default=0, server_default="0"),
    Column("not_before", UTCDateTime(), nullable=False),
    Column("idempotency_key", String(200)),
    Column("labels", JSONType, nullable=False, default=dict),
    Column("attempts", Integer, nullable=False, default=0, server_default="0"),
    Column("max_attempts", Integer, nullable=False, default=3, server_default="3"),
    # Fencing number: bumped by every claim; every write of a run is conditioned on it.
    Column("fence", BigInteger, nullable=False, default=0, server_default="0"),
    Column(
        "cancel_requested", Boolean, nullable=False, default=False, server_default=text("false")
    ),
    # ``interrupt`` mode: a newer submission asks the run to report and stop.
    Column(
        "interrupt_requested",
        Boolean,
        nullable=False,
        default=False,
        server_default=text("false"),
    ),
    # Messages waiting in the run's inbox (steer, signals); the settle sees it and requeues them.
    Column("inbox", Integer, nullable=False, default=0, server_default="0"),
    # An A2A push-notification config was set whose delivery is not journaled yet: the settle
    # returns it (no read of the configs for tasks without one), the sweeper journals the
    # deliveries of ended tasks that still carry it (a worker lost after its settle).
    Column("push_pending", Boolean, nullable=False, default=False, server_default=text("false")),
    Column("worker", String(200)),
    # The caller that submitted it (API caller, trigger, A2A caller), for the authorize policy.
    Column("caller", String(200)),
    # Who or what the work is about across conversations (a user id): ``resource`` recall and
    # working memory reach its other conversations, within the same scope.
    Column("resource_id", String(200)),
    stamp("created_at"),
    Column("leased_at", UTCDateTime()),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Column("error", Text),
    # Why it did not succeed, in one word (``fleet.domain.error_classes``): set with a failed
    # or cancelled end; NULL otherwise (and for tasks that ended under a release before it).
    Column("error_class", String(32)),
    Column("result", JSONType),
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
    # The stop watch's read: the active tasks asked to stop (a cancel or an interrupt), few.
    partial_index(
        "ix_tasks_stop_asked",
        "id",
        where=STOP_ASKED,
    ),
    Index("ix_tasks_listing", "deployment", "scope", "created_at"),
    # The operator UI's last-hour throughput and failures: a range of recent finishes, not
    # a scan of every task ever finished.
    Index("ix_tasks_finished_at", "finished_at"),
    # Failures by class (bulk retries, the UI's failures page): the tasks that did not succeed.
    partial_index(
        "ix_tasks_error_class",
        "tenant",
        "error_class",
        "created_at",
        where="error_class IS NOT NULL",
    ),
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
    # A resource's tasks (export and erasure of a person's data, ``fleet.store.rights``).
    partial_index(
        "ix_tasks_resource",
        "tenant",
        "resource_id",
        where="resource_id IS NOT NULL",
    ),
    # A tenant's unfinished tasks (its queued quota, ``fleet tenants``): few per tenant.
    partial_index(
        "ix_tasks_tenant_unfinished",
        "tenant",
        "status",
        where=_UNFINISHED,
    ),
)

#: Every idempotency key seen in a scope and the task it produced (or was merged into).
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    tenant(primary_key=True),
    Column("scope", String(200), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column(
        "task_id",
        Uuid,
        ForeignKey("tasks.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    stamp("created_at"),
)

#: One execution attempt of a task: frozen context snapshot, usage and outcome.
runs = Table(
    "runs",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False, index=True),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("attempt", Integer, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
    Column("model", String(200), nullable=False),
    # The prompt exactly as the first model step saw it, plus what was injected and dropped.
    Column("context", JSONType, nullable=False),
    Column("usage", JSONType, nullable=False, default=dict),
    Column("labels", JSONType, nullable=False, default=dict),
    Column("error", Text),
    stamp("started_at"),
    Column("finished_at", UTCDateTime()),
    # ``host:pid`` of the worker process that ran it.
    Column("worker", String(200)),
    # What the run did besides its steps: journal steps it replayed, tool results it shortened.
    Column("details", JSONType, nullable=False, default=dict, server_default=text("'{}'")),
    # The release of fleet that ran it (``0.2.0+3f1c2a9b0d4e``: version plus build).
    Column("release", String(100)),
)

#: An agent's configuration as runs started with it, once per fingerprint (named by each run's
#: frozen context, ``fleet.domain.snapshots``): a resumed run keeps it after the config changed.
agent_configs = Table(
    "agent_configs",
    metadata,
    Column("fingerprint", String(64), primary_key=True),
    Column("agent", String(200), nullable=False),
    # ``{"agent": <AgentConfig dump>, "tools": [<each Python tool's spec as the model saw it>]}``
    Column("config", JSONType, nullable=False),
    stamp("created_at"),
)

#: Every schema revision applied, with its kind (``expand`` adds only, ``contract`` removes): a
#: process of an older release reads it to tell whether it may still run on this database.
schema_revisions = Table(
    "schema_revisions",
    metadata,
    Column("revision", String(100), primary_key=True),
    Column("kind", String(16), nullable=False),
    stamp("applied_at"),
)

#: A conversation message: accepted user input or an assistant reply (with delivery status).
messages = Table(
    "messages",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("generation", Integer, nullable=False, default=0, server_default="0"),
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="SET NULL")),
    Column("run_id", Uuid, ForeignKey("runs.id", ondelete="SET NULL")),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    # ``accepted`` (user input), ``sent`` (reply returned), ``pending`` / ``unknown`` (journal).
    Column("delivery", String(16), nullable=False),
    stamp("created_at"),
    Index("ix_messages_history", "conversation_id", "generation", "id"),
    # Retention: the messages said before a cutoff, oldest first.
    Index("ix_messages_created_at", "created_at"),
)

#: A recorded step of a run (one model call or one tool call): the run's step journal.
traces = Table(
    "traces",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", Uuid, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("name", String(200), nullable=False),
    Column("input", JSONType),
    Column("output", JSONType),
    Column("error", Text),
    Column("usage", JSONType, nullable=False, default=dict),
    Column("labels", JSONType, nullable=False, default=dict),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("duration_ms", Double, nullable=False),
    # ``finished``, or ``started``: a tool call journaled before it ran (in flight until its
    # result replaces the row); a retry that finds it so knows the call may have had its effect.
    Column("status", String(16), nullable=False, default="finished", server_default="finished"),
    # The model's id for a tool call (ties a call's result to the step that asked for it).
    Column("call_id", String(200)),
    # Copied from an earlier attempt's journal instead of being computed again.
    Column("replayed", Boolean, nullable=False, default=False, server_default=text("false")),
    UniqueConstraint("run_id", "step"),
)

#: The token ledger: one row per model step a run made (not a replayed one), with its tenant and
#: UTC day, for tenants' budgets. No foreign keys: deleting a conversation does not give its
#: tokens back.
token_usage = Table(
    "token_usage",
    metadata,
    Column("run_id", Uuid, primary_key=True),
    Column("step", Integer, primary_key=True),
    Column("task_id", Uuid, nullable=False),
    Column("tenant", String(63), nullable=False),
    # The UTC day the step was made (budgets reset at 00:00 UTC).
    Column("day", Date, nullable=False),
    # Prompt and completion tokens as the model reported them.
    Column("tokens", BigInteger, nullable=False),
    # What they cost, in millionths of ``[prices]``' unit (0: the model has no price).
    Column("cost_micros", BigInteger, nullable=False, default=0, server_default=text("0")),
    stamp("created_at"),
    Index("ix_token_usage_tenant_day", "tenant", "day"),
    Index("ix_token_usage_task", "task_id"),
)

#: Embedded mode's count of submissions refused by a tenant's quota, per UTC day (a fleet counts
#: them in Redis, where a flood of refusals costs no database write).
quota_refusals = Table(
    "quota_refusals",
    metadata,
    Column("day", Date, primary_key=True),
    Column("tenant", String(63), primary_key=True),
    Column("count", BigInteger, nullable=False, default=0),
)

#: A message for a running run, delivered at its next step boundary (steer, signals).
#:
#: ``pending`` until a step boundary takes it (``delivered``, journaled as an ``inbox`` step of
#: that run) or the run ends first and it becomes a task of its own (``requeued``), or is dropped
#: (``cancelled``, with ``error``) when the conversation was reset meanwhile.
run_inbox = Table(
    "run_inbox",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    # ``steer`` (a submission), ``signal`` (SignalTask, signal_agent).
    Column("source", String(16), nullable=False),
    Column("input", JSONType, nullable=False),
    Column("input_bytes", Integer, nullable=False, default=0),
    Column("labels", JSONType, nullable=False, default=dict),
    Column("idempotency_key", String(200)),
    Column("caller", String(200)),
    Column("status", String(16), nullable=False, default="pending"),
    Column("run_id", Uuid, ForeignKey("runs.id", ondelete="SET NULL")),
    # The run's step that delivered it (its ``inbox`` journal step).
    Column("step", Integer),
    # Why it was cancelled (its run's generation is no longer the conversation's).
    Column("error", Text),
    # The task it became when the run ended before taking it.
    Column("requeued_task_id", Uuid, ForeignKey("tasks.id", ondelete="SET NULL")),
    stamp("created_at"),
    Column("delivered_at", UTCDateTime()),
    Index("ix_run_inbox_task_status", "task_id", "status"),
)

__all__ = [
    "TASK_STATUSES",
    "BigId",
    "FloatArray",
    "JSONType",
    "UTCDateTime",
    "audit_log",
    "bulk_jobs",
    "conversation_tombstones",
    "conversations",
    "delegations",
    "deliveries",
    "followups",
    "idempotency_keys",
    "inbound_events",
    "memory_block_versions",
    "memory_blocks",
    "message_embeddings",
    "messages",
    "metadata",
    "note_operations",
    "notes",
    "observations",
    "push_configs",
    "quota_refusals",
    "resource_tombstones",
    "run_inbox",
    "runs",
    "schedules",
    "schema_revisions",
    "tasks",
    "token_usage",
    "traces",
    "utcnow",
    "waits",
    "working_memory",
    "working_memory_operations",
]
