"""stop requests: the runs asked to stop (a cancel or an interrupt of an active task) in an index
of their own, so every worker reads them twice a second without naming its runs

Revision ID: 0021_stop_requests
Revises: 0020_releases
Create Date: 2026-12-07 14:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021_stop_requests"
down_revision: str | None = "0020_releases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Adds only (an index): a release before it runs on the schema after it.
fleet_kind = "expand"

_WHERE = "status IN ('leased', 'running') AND (cancel_requested OR interrupt_requested)"


def upgrade() -> None:
    op.create_index(
        "ix_tasks_stop_asked",
        "tasks",
        ["id"],
        postgresql_where=sa.text(_WHERE),
        sqlite_where=sa.text(_WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_stop_asked", table_name="tasks")
