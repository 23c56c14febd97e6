"""index the unfinished tasks of each conversation (head lookups stay O(1) as history grows)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 18:15:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNFINISHED = "status IN ('queued', 'interrupted', 'leased', 'running')"


def upgrade() -> None:
    op.create_index(
        "ix_tasks_unfinished",
        "tasks",
        ["conversation_id", "seq"],
        unique=False,
        postgresql_where=sa.text(_UNFINISHED),
        sqlite_where=sa.text(_UNFINISHED),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_tasks_unfinished",
        table_name="tasks",
        postgresql_where=sa.text(_UNFINISHED),
        sqlite_where=sa.text(_UNFINISHED),
    )
