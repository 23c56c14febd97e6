"""memory for agents: block version receipts, note operation receipts, the task's caller

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("memory_block_versions") as batch:
        batch.add_column(sa.Column("receipt", sa.String(length=200), nullable=True))
        batch.create_unique_constraint(
            "uq_memory_block_versions_block_id_receipt", ["block_id", "receipt"]
        )
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("caller", sa.String(length=200), nullable=True))
    op.create_table(
        "note_operations",
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("receipt", sa.String(length=200), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("outcome", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_note_operations_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "receipt", name="pk_note_operations"),
    )


def downgrade() -> None:
    op.drop_table("note_operations")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("caller")
    with op.batch_alter_table("memory_block_versions") as batch:
        batch.drop_constraint("uq_memory_block_versions_block_id_receipt", type_="unique")
        batch.drop_column("receipt")
