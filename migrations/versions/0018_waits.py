"""waiting: the ``waiting`` task status (claimable once due, unfinished: it blocks its
conversation), the ``waits`` table of what waiting tasks wait for (tool approvals, delegated
tasks) and the ``followups`` agents schedule (``schedule_followup``)

Revision ID: 0018_waits
Revises: 0017_ledger_cost
Create Date: 2026-12-10 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018_waits"
down_revision: str | None = "0017_ledger_cost"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_OLD = (
    "queued",
    "leased",
    "running",
    "interrupted",
    "succeeded",
    "failed",
    "cancelled",
    "superseded",
)
_NEW = (*_OLD, "waiting")
#: Partial indexes over the claimable or unfinished tasks: (name, columns, old set, new set).
_INDEXES = (
    (
        "ix_tasks_claimable_due",
        ["not_before"],
        ("queued", "interrupted"),
        ("queued", "interrupted", "waiting"),
    ),
    (
        "ix_tasks_unfinished",
        ["conversation_id", "seq"],
        ("queued", "interrupted", "leased", "running"),
        ("queued", "interrupted", "waiting", "leased", "running"),
    ),
    (
        "ix_tasks_tenant_unfinished",
        ["tenant", "status"],
        ("queued", "interrupted", "leased", "running"),
        ("queued", "interrupted", "waiting", "leased", "running"),
    ),
)


def _in(statuses: tuple[str, ...]) -> str:
    return "status IN (" + ", ".join(f"'{s}'" for s in statuses) + ")"


def _indexes(new: bool) -> None:
    for name, columns, old_set, new_set in _INDEXES:
        op.drop_index(name, table_name="tasks")
        where = sa.text(_in(new_set if new else old_set))
        op.create_index(name, "tasks", columns, postgresql_where=where, sqlite_where=where)


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("status", type_="check")
        batch.create_check_constraint("status", _in(_NEW))
    _indexes(new=True)
    op.create_table(
        "waits",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=63), server_default="default", nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("arguments", _JSON, nullable=False),
        sa.Column("redacted", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("target_task_id", sa.Uuid(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_waits_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_waits"),
        sa.UniqueConstraint("task_id", "call_id", name="uq_waits_task_id_call_id"),
    )
    pending = sa.text("status = 'pending'")
    op.create_index(
        "ix_waits_pending",
        "waits",
        ["task_id"],
        postgresql_where=pending,
        sqlite_where=pending,
    )
    targeted = sa.text("target_task_id IS NOT NULL")
    op.create_index(
        "ix_waits_target",
        "waits",
        ["target_task_id"],
        postgresql_where=targeted,
        sqlite_where=targeted,
    )


    op.create_table(
        "followups",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=63), server_default="default", nullable=False),
        sa.Column("deployment", sa.String(length=100), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("conversation_key", sa.String(length=200), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("labels", _JSON, nullable=False),
        sa.Column("caller", sa.String(length=200), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("admitted_task_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_followups_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_followups_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_followups"),
        sa.UniqueConstraint("task_id", "call_id", name="uq_followups_task_id_call_id"),
    )
    for name, column in (("ix_followups_due", "due_at"), ("ix_followups_pending", "conversation_id")):
        op.create_index(
            name, "followups", [column], postgresql_where=pending, sqlite_where=pending
        )


def downgrade() -> None:
    op.drop_index("ix_followups_pending", table_name="followups")
    op.drop_index("ix_followups_due", table_name="followups")
    op.drop_table("followups")
    op.drop_index("ix_waits_target", table_name="waits")
    op.drop_index("ix_waits_pending", table_name="waits")
    op.drop_table("waits")
    op.execute("UPDATE tasks SET status = 'interrupted' WHERE status = 'waiting'")
    _indexes(new=False)
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("status", type_="check")
        batch.create_check_constraint("status", _in(_OLD))
