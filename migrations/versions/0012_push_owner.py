"""push configs keep the caller that set them (only it reads, replaces or deletes them)

Revision ID: 0012_push_owner
Revises: 0011_tasks_finished
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_push_owner"
down_revision: str | None = "0011_tasks_finished"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("push_configs") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=200), nullable=True))
    # A config set before owners were kept belongs to the caller that submitted its task.
    op.execute(
        "UPDATE push_configs SET owner = "
        "(SELECT tasks.caller FROM tasks WHERE tasks.id = push_configs.task_id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("push_configs") as batch:
        batch.drop_column("owner")
