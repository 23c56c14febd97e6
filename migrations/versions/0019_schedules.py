"""schedules: crons and intervals that submit tasks, each tick exactly once

Revision ID: 0019_schedules
Revises: 0018_waits
Create Date: 2026-12-02 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0019_schedules"
down_revision: str | None = "0018_waits"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=63), server_default="default", nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("caller", sa.String(length=200), nullable=True),
        sa.Column("spec", _JSON, nullable=False),
        sa.Column("last_tick", _TS, nullable=True),
        sa.Column("state", sa.String(length=16), server_default="new", nullable=False),
        sa.Column("last_task_id", sa.Uuid(), nullable=True),
        sa.Column("next_tick", _TS, nullable=True),
        sa.Column("fired", sa.Integer(), server_default="0", nullable=False),
        sa.Column("skipped", sa.Integer(), server_default="0", nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["last_task_id"],
            ["tasks.id"],
            name="fk_schedules_last_task_id_tasks",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_schedules"),
        sa.UniqueConstraint("tenant", "scope", "name", name="uq_schedules_tenant_scope_name"),
    )
    op.create_index("ix_schedules_next_tick", "schedules", ["next_tick"])


def downgrade() -> None:
    op.drop_index("ix_schedules_next_tick", table_name="schedules")
    op.drop_table("schedules")
