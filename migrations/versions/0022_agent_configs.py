"""agent configs: an agent's configuration as runs started with it, kept once per fingerprint, so a
run resumed after the config changed (a wait, a hand-back, a new release) keeps what it began with

Revision ID: 0022_agent_configs
Revises: 0021_stop_requests
Create Date: 2026-12-07 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022_agent_configs"
down_revision: str | None = "0021_stop_requests"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Adds only (a new table): a release before it runs on the schema after it.
fleet_kind = "expand"

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "agent_configs",
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("config", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint"),
    )


def downgrade() -> None:
    op.drop_table("agent_configs")
