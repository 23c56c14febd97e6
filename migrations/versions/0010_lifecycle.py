"""conversation lifecycle: tombstones of deleted conversations, messages by age (retention)

Revision ID: 0010_lifecycle
Revises: 0009_delivery
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_lifecycle"
down_revision: str | None = "0009_delivery"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "conversation_tombstones",
        sa.Column("deployment", sa.String(length=100), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("deleted_at", _TS, nullable=False),
        sa.Column("deleted_by", sa.String(length=200), nullable=False),
        sa.Column("tasks", sa.Integer(), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "deployment", "scope", "key", name="pk_conversation_tombstones"
        ),
    )
    op.create_index("ix_messages_created_at", "messages", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_messages_created_at", table_name="messages")
    op.drop_table("conversation_tombstones")
