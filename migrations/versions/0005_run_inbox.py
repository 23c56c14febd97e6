"""conversation control: the run inbox, interrupt requests, the superseded status

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_OLD = ("queued", "leased", "running", "interrupted", "succeeded", "failed", "cancelled")
_NEW = (*_OLD, "superseded")


def _check(statuses: tuple[str, ...]) -> str:
    return "status IN (" + ", ".join(f"'{s}'" for s in statuses) + ")"


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(
            sa.Column(
                "interrupt_requested", sa.Boolean(), server_default=sa.text("false"), nullable=False
            )
        )
        batch.add_column(sa.Column("inbox", sa.Integer(), server_default="0", nullable=False))
        batch.drop_constraint("status", type_="check")
        batch.create_check_constraint("status", _check(_NEW))
    op.create_table(
        "run_inbox",
        sa.Column("id", _BIGID, autoincrement=True, nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("input", _JSON, nullable=False),
        sa.Column("input_bytes", sa.Integer(), nullable=False),
        sa.Column("labels", _JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("caller", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("requeued_task_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"],
            name="fk_run_inbox_conversation_id_conversations", ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["requeued_task_id"], ["tasks.id"],
            name="fk_run_inbox_requeued_task_id_tasks", ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_run_inbox_run_id_runs", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_run_inbox_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_run_inbox"),
    )
    op.create_index("ix_run_inbox_task_status", "run_inbox", ["task_id", "status"])
    op.create_index(
        "ix_tasks_inbox",
        "tasks",
        ["id"],
        postgresql_where=sa.text("inbox > 0"),
        sqlite_where=sa.text("inbox > 0"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_inbox", table_name="tasks")
    op.drop_index("ix_run_inbox_task_status", table_name="run_inbox")
    op.drop_table("run_inbox")
    op.execute("UPDATE tasks SET status = 'failed' WHERE status = 'superseded'")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("status", type_="check")
        batch.create_check_constraint("status", _check(_OLD))
        batch.drop_column("inbox")
        batch.drop_column("interrupt_requested")
