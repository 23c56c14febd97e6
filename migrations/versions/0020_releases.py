"""releases: every run names the release that ran it; every applied revision is recorded with its
kind, so a process of an older release can tell whether it may still run here

Revision ID: 0020_releases
Revises: 0019_schedules
Create Date: 2026-12-07 02:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_releases"
down_revision: str | None = "0019_schedules"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Adds only (a nullable column, a new table): a release before it runs on the schema after it.
fleet_kind = "expand"


def upgrade() -> None:
    op.add_column("runs", sa.Column("release", sa.String(length=100), nullable=True))
    op.create_table(
        "schema_revisions",
        sa.Column("revision", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("revision"),
    )


def downgrade() -> None:
    op.drop_table("schema_revisions")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("release")
