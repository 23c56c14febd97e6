"""tasks by finished_at: the operator overview's last-hour figures read a range, not every task

Revision ID: 0011_tasks_finished
Revises: 0010_lifecycle
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011_tasks_finished"
down_revision: str | None = "0010_lifecycle"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_tasks_finished_at", "tasks", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_tasks_finished_at", table_name="tasks")
