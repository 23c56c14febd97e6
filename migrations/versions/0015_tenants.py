"""tenants: every conversation, task, idempotency key, tombstone, memory block and embedding
names its tenant (existing rows: ``default``; ``fleet migrate`` then moves them by config);
tasks carry a priority

Revision ID: 0015_tenants
Revises: 0014_push_pending
Create Date: 2026-12-08 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_tenants"
down_revision: str | None = "0014_push_pending"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNFINISHED = "status IN ('queued', 'interrupted', 'leased', 'running')"


def _tenant() -> sa.Column[str]:
    return sa.Column("tenant", sa.String(length=63), nullable=False, server_default="default")


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(_tenant())
        batch.drop_constraint("uq_conversations_deployment_scope_key", type_="unique")
        batch.create_unique_constraint(
            "uq_conversations_deployment_tenant_scope_key",
            ["deployment", "tenant", "scope", "key"],
        )
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(_tenant())
        batch.add_column(
            sa.Column("priority", sa.SmallInteger(), nullable=False, server_default="5")
        )
    op.create_index(
        "ix_tasks_tenant_unfinished",
        "tasks",
        ["tenant", "status"],
        postgresql_where=sa.text(_UNFINISHED),
        sqlite_where=sa.text(_UNFINISHED),
    )
    with op.batch_alter_table("conversation_tombstones") as batch:
        batch.add_column(_tenant())
        batch.drop_constraint("pk_conversation_tombstones", type_="primary")
        batch.create_primary_key(
            "pk_conversation_tombstones", ["deployment", "tenant", "scope", "key"]
        )
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.add_column(_tenant())
        batch.drop_constraint("pk_idempotency_keys", type_="primary")
        batch.create_primary_key("pk_idempotency_keys", ["tenant", "scope", "key"])
    with op.batch_alter_table("memory_blocks") as batch:
        batch.add_column(_tenant())
        batch.drop_constraint("uq_memory_blocks_namespace_name", type_="unique")
        batch.create_unique_constraint(
            "uq_memory_blocks_tenant_namespace_name", ["tenant", "namespace", "name"]
        )
    op.drop_index("ix_message_embeddings_resource", table_name="message_embeddings")
    with op.batch_alter_table("message_embeddings") as batch:
        batch.add_column(_tenant())
    op.create_index(
        "ix_message_embeddings_resource",
        "message_embeddings",
        ["tenant", "scope", "namespace", "resource_id", "message_id"],
    )


def downgrade() -> None:
    op.drop_index("ix_message_embeddings_resource", table_name="message_embeddings")
    with op.batch_alter_table("message_embeddings") as batch:
        batch.drop_column("tenant")
    op.create_index(
        "ix_message_embeddings_resource",
        "message_embeddings",
        ["scope", "namespace", "resource_id", "message_id"],
    )
    with op.batch_alter_table("memory_blocks") as batch:
        batch.drop_constraint("uq_memory_blocks_tenant_namespace_name", type_="unique")
        batch.create_unique_constraint("uq_memory_blocks_namespace_name", ["namespace", "name"])
        batch.drop_column("tenant")
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.drop_constraint("pk_idempotency_keys", type_="primary")
        batch.create_primary_key("pk_idempotency_keys", ["scope", "key"])
        batch.drop_column("tenant")
    with op.batch_alter_table("conversation_tombstones") as batch:
        batch.drop_constraint("pk_conversation_tombstones", type_="primary")
        batch.create_primary_key("pk_conversation_tombstones", ["deployment", "scope", "key"])
        batch.drop_column("tenant")
    op.drop_index("ix_tasks_tenant_unfinished", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("priority")
        batch.drop_column("tenant")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_constraint("uq_conversations_deployment_tenant_scope_key", type_="unique")
        batch.create_unique_constraint(
            "uq_conversations_deployment_scope_key", ["deployment", "scope", "key"]
        )
        batch.drop_column("tenant")
