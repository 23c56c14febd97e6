"""tasks.push_pending: a push-notification config whose delivery is not journaled yet, so a
settle needs no read of the configs (the settle statement returns the flag)

Revision ID: 0014_push_pending
Revises: 0013_inbox_error
Create Date: 2026-12-07 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_push_pending"
down_revision: str | None = "0013_inbox_error"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tasks",
        sa.Column("push_pending", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    # Configs set before this revision whose delivery was not journaled: the sweeper's look.
    op.execute(
        "UPDATE tasks SET push_pending = true WHERE id IN ("
        " SELECT p.task_id FROM push_configs p WHERE NOT EXISTS ("
        "  SELECT 1 FROM deliveries d WHERE d.task_id = p.task_id"
        "  AND d.target = 'push:' || p.id))"
    )
    op.create_index(
        "ix_tasks_push_pending",
        "tasks",
        ["id"],
        postgresql_where=sa.text("push_pending"),
        sqlite_where=sa.text("push_pending"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_push_pending", table_name="tasks")
    op.drop_column("tasks", "push_pending")
