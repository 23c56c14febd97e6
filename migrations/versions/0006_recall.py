"""recall and compaction: message embeddings, working memory, observations, tasks' resource

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("resource_id", sa.String(length=200), nullable=True))
    op.create_table(
        "message_embeddings",
        sa.Column("message_id", _BIGID, nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("namespace", sa.String(length=100), nullable=False),
        sa.Column("resource_id", sa.String(length=200), nullable=True),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("labels", _JSON, nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"],
            name="fk_message_embeddings_conversation_id_conversations", ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"],
            name="fk_message_embeddings_message_id_messages", ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", name="pk_message_embeddings"),
    )
    op.create_index(
        "ix_message_embeddings_conversation",
        "message_embeddings",
        ["conversation_id", "message_id"],
    )
    op.create_index(
        "ix_message_embeddings_resource",
        "message_embeddings",
        ["scope", "namespace", "resource_id", "message_id"],
    )
    op.create_table(
        "working_memory",
        sa.Column("key", sa.String(length=500), nullable=False),
        sa.Column("value", _JSON, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_working_memory"),
    )
    op.create_table(
        "working_memory_operations",
        sa.Column("receipt", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=500), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("receipt", name="pk_working_memory_operations"),
    )
    op.create_table(
        "observations",
        sa.Column("id", _BIGID, autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("from_message_id", sa.BigInteger(), nullable=False),
        sa.Column("to_message_id", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"],
            name="fk_observations_conversation_id_conversations", ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_observations"),
    )
    op.create_index(
        "uq_observations_range",
        "observations",
        ["conversation_id", "generation", "level", "from_message_id", "to_message_id"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_observations_range", table_name="observations")
    op.drop_table("observations")
    op.drop_table("working_memory_operations")
    op.drop_table("working_memory")
    op.drop_index("ix_message_embeddings_resource", table_name="message_embeddings")
    op.drop_index("ix_message_embeddings_conversation", table_name="message_embeddings")
    op.drop_table("message_embeddings")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("resource_id")
