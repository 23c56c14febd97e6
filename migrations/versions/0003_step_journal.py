"""step journal: trace status, call id and replay mark; run worker and details

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("traces") as batch:
        batch.add_column(
            sa.Column("status", sa.String(length=16), server_default="finished", nullable=False)
        )
        batch.add_column(sa.Column("call_id", sa.String(length=200), nullable=True))
        batch.add_column(
            sa.Column("replayed", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("worker", sa.String(length=200), nullable=True))
        batch.add_column(
            sa.Column("details", _JSON, server_default=sa.text("'{}'"), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("details")
        batch.drop_column("worker")
    with op.batch_alter_table("traces") as batch:
        batch.drop_column("replayed")
        batch.drop_column("call_id")
        batch.drop_column("status")
