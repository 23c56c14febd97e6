"""delegation: delegated tasks' chains and the results reported back

Revision ID: 0007_delegation
Revises: 0006
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007_delegation"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = sa.DateTime(timezone=True)
_UNREPORTED = "mode = 'start' AND reported_at IS NULL"


def upgrade() -> None:
    op.create_table(
        "delegations",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("mode", sa.String(length=8), nullable=False),
        sa.Column("parent_task_id", sa.Uuid(), nullable=True),
        sa.Column("chain", _JSON, nullable=False),
        sa.Column("report_to", _JSON, nullable=True),
        sa.Column("reported_at", _TS, nullable=True),
        sa.Column("reported_task_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_delegations_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", name="pk_delegations"),
    )
    op.create_index(
        "ix_delegations_unreported",
        "delegations",
        ["task_id"],
        postgresql_where=sa.text(_UNREPORTED),
        sqlite_where=sa.text(_UNREPORTED),
    )


def downgrade() -> None:
    op.drop_index("ix_delegations_unreported", table_name="delegations")
    op.drop_table("delegations")
