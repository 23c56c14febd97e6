"""task error class: why a task did not succeed, in one word (``fleet.domain.error_classes``),
for bulk retries and the UI's failures page

Revision ID: 0024_task_error_class
Revises: 0023_event_waits
Create Date: 2026-12-07 22:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024_task_error_class"
down_revision: str | None = "0023_event_waits"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Adds only (a nullable column, an index): a release before it runs on the schema after it
#: (the tasks it ends have no class).
fleet_kind = "expand"

_CLASSED = sa.text("error_class IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("error_class", sa.String(length=32), nullable=True))
    op.create_index(
        "ix_tasks_error_class",
        "tasks",
        ["tenant", "error_class", "created_at"],
        postgresql_where=_CLASSED,
        sqlite_where=_CLASSED,
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_error_class", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("error_class")
