"""Tables of work leaving a run: delegations (``call_agent``, ``start_agent``), the reply
delivery journal and A2A push configs.

Re-exported by ``fleet.store.schema``, which names their Core tables (``s.deliveries``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import Mapped, mapped_column

from fleet.store.schema_types import Base, JSONType, partial_index, utcnow


class Delegation(Base):
    """A delegated task's place in its chain, and where its result goes (``start_agent``).

    Written in the admission transaction of the task it describes, so the task never runs
    without it. A ``start`` delegation is reported back once: ``reported_at`` is set when the
    task carrying its result was admitted (idempotently) into the caller's conversation.
    """

    __tablename__ = "delegations"
    __table_args__ = (
        # The sweeper's scan for started tasks whose result was not reported yet: few.
        partial_index(
            "ix_delegations_unreported",
            "task_id",
            where="mode = 'start' AND reported_at IS NULL",
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
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Delivery(Base):
    """The journal of one reply delivered to one place: ``pending → sent | failed | unknown``.

    Its id is the ``Idempotency-Key`` every attempt sends. An attempt starts only by a
    conditional update (``status = 'pending'`` and no live claim) that sets ``claim``; its
    outcome is written only under that claim, so nothing is sent again once ``sent`` is stored.
    """

    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("task_id", "target"),
        partial_index(
            "ix_deliveries_pending",
            "next_at",
            where="status = 'pending'",
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
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


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
    #: The caller that set it: the only one that reads, replaces or deletes it.
    owner: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
