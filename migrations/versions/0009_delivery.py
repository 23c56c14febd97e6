"""reply delivery: the delivery journal and A2A push-notification configs

Revision ID: 0009_delivery
Revises: 0008_vector
Create Date: 2026-12-10 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009_delivery"
down_revision: str | None = "0008_vector"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("target", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", _TS, nullable=True),
        sa.Column("claim", sa.String(length=64), nullable=True),
        sa.Column("claimed_until", _TS, nullable=True),
        sa.Column("journal", _JSON, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_deliveries_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_deliveries"),
        sa.UniqueConstraint("task_id", "target", name="uq_deliveries_task_id_target"),
    )
    op.create_index(
        "ix_deliveries_pending",
        "deliveries",
        ["next_at"],
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )
    op.create_table(
        "push_configs",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("token", sa.Text(), nullable=True),
        sa.Column("authentication", _JSON, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_push_configs_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", "id", name="pk_push_configs"),
    )


def downgrade() -> None:
    op.drop_table("push_configs")
    op.drop_index("ix_deliveries_pending", table_name="deliveries")
    op.drop_table("deliveries")
