"""bulk actions: why a task did not succeed, in one word (``fleet.domain.error_classes``), and
the bulk jobs that retry or cancel the tasks a filter names

Revision ID: 0024_bulk_actions
Revises: 0023_event_waits
Create Date: 2026-12-07 22:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0024_bulk_actions"
down_revision: str | None = "0023_event_waits"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Adds only (a nullable column, a table, indexes): a release before it runs on the schema
#: after it (the tasks it ends have no class).
fleet_kind = "expand"

_CLASSED = sa.text("error_class IS NOT NULL")
_RUNNING = sa.text("status = 'running'")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


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
    op.create_table(
        "bulk_jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=63), server_default="default", nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=True),
        sa.Column("reach", _JSON, nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("filter", _JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("matched", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("errors", _JSON, nullable=False),
        sa.Column("cursor_created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cursor_id", sa.Uuid(), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "idempotency_key"),
    )
    op.create_index(
        "ix_bulk_jobs_running",
        "bulk_jobs",
        ["claimed_until"],
        postgresql_where=_RUNNING,
        sqlite_where=_RUNNING,
    )


def downgrade() -> None:
    op.drop_index("ix_bulk_jobs_running", table_name="bulk_jobs")
    op.drop_table("bulk_jobs")
    op.drop_index("ix_tasks_error_class", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("error_class")
