"""Tables of work leaving a run: delegations (``call_agent``, ``start_agent``), the reply
delivery journal and A2A push configs.

Re-exported by ``fleet.store.schema`` (``s.deliveries``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import (
    Column,
    ForeignKey,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
)

from fleet.store.schema_types import JSONType, UTCDateTime, metadata, partial_index, stamp

#: A delegated task's place in its chain, and where its result goes (``start_agent``).
#:
#: Written in the admission transaction of the task it describes, so the task never runs without
#: it. A ``start`` delegation is reported back once: ``reported_at`` is set when the task
#: carrying its result was admitted (idempotently) into the caller's conversation.
delegations = Table(
    "delegations",
    metadata,
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    # ``call`` (the caller waits), ``start`` (reported back), ``result`` (a report).
    Column("mode", String(8), nullable=False),
    # The task whose run delegated (None for a report).
    Column("parent_task_id", Uuid),
    # Conversations of the runs that delegated, root first: the depth is its length.
    Column("chain", JSONType, nullable=False),
    # ``start``: the caller's conversation, labels and caller the result goes to.
    Column("report_to", JSONType),
    Column("reported_at", UTCDateTime()),
    # The task that carried the result back (or the running task it was steered into).
    Column("reported_task_id", Uuid),
    stamp("created_at"),
    # The sweeper's scan for started tasks whose result was not reported yet: few.
    partial_index(
        "ix_delegations_unreported",
        "task_id",
        where="mode = 'start' AND reported_at IS NULL",
    ),
)

#: The journal of one reply delivered to one place: ``pending → sent | failed | unknown``.
#:
#: Its id is the ``Idempotency-Key`` every attempt sends. An attempt starts only by a
#: conditional update (``status = 'pending'`` and no live claim) that sets ``claim``; its
#: outcome is written only under that claim, so nothing is sent again once ``sent`` is stored.
deliveries = Table(
    "deliveries",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    # ``reply:<file>`` (a trigger's or deployment's ``[reply]``) or ``push:<config id>``.
    Column("target", String(300), nullable=False),
    # ``reply`` or ``push``.
    Column("kind", String(16), nullable=False),
    # Where it goes (rendered when the first attempt starts; never holds credentials).
    Column("url", Text),
    Column("status", String(16), nullable=False, default="pending"),
    Column("attempts", Integer, nullable=False, default=0, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    # When the next attempt may start (pending only).
    Column("next_at", UTCDateTime()),
    # The running attempt's token and until when it holds.
    Column("claim", String(64)),
    Column("claimed_until", UTCDateTime()),
    # Every attempt: number, start, outcome, HTTP status, duration, error (redacted).
    Column("journal", JSONType, nullable=False, default=list),
    Column("error", Text),
    stamp("created_at"),
    stamp("updated_at"),
    UniqueConstraint("task_id", "target"),
    partial_index(
        "ix_deliveries_pending",
        "next_at",
        where="status = 'pending'",
    ),
)

#: An A2A push-notification config of a task: where its updates go, and the caller's token.
#:
#: The token and credentials are kept to be sent back (the caller checks them); they are shown
#: only to the caller that set them and never journaled or logged.
push_configs = Table(
    "push_configs",
    metadata,
    Column("task_id", Uuid, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("id", String(200), primary_key=True),
    Column("url", Text, nullable=False),
    Column("token", Text),
    # ``{"scheme": …, "credentials": …}`` → ``Authorization: <scheme> <credentials>``.
    Column("authentication", JSONType),
    # The caller that set it: the only one that reads, replaces or deletes it.
    Column("owner", String(200)),
    stamp("created_at"),
)
