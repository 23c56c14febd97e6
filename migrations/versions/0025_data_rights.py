"""data rights: a resource's tasks found by an index, the tombstones of erased resources,
and the audit log

Revision ID: 0025_data_rights
Revises: 0024_bulk_actions
Create Date: 2026-12-08 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0025_data_rights"
down_revision: str | None = "0024_bulk_actions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Adds only (an index, two tables): a release before it runs on the schema after it (it does
#: not read the tombstones, so it admits tasks naming an erased resource; it records no audit
#: entries).
fleet_kind = "expand"

_NAMED = sa.text("resource_id IS NOT NULL")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_index(
        "ix_tasks_resource",
        "tasks",
        ["tenant", "resource_id"],
        postgresql_where=_NAMED,
        sqlite_where=_NAMED,
    )
    op.create_table(
        "resource_tombstones",
        sa.Column("tenant", sa.String(length=63), server_default="default", nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("erased_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("refused_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("erased_by", sa.String(length=200), nullable=False),
        sa.Column("counts", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "digest"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=True),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("object", sa.String(length=300), nullable=True),
        sa.Column("address", sa.String(length=100), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("detail", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_log_tenant_at", "audit_log", ["tenant", "at"])
    op.create_index("ix_audit_log_at", "audit_log", ["at"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("resource_tombstones")
    op.drop_index("ix_tasks_resource", table_name="tasks")
