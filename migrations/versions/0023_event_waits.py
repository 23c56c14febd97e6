"""event waits: a wait for an event of a name and key (``wait_for_event``), and the events sent
for such waits, kept for the lookback window

Revision ID: 0023_event_waits
Revises: 0022_agent_configs
Create Date: 2026-12-07 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0023_event_waits"
down_revision: str | None = "0022_agent_configs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Adds only (nullable columns, a table, indexes): a release before it runs on the schema after it.
fleet_kind = "expand"

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_PENDING_EVENT = sa.text("kind = 'event' AND status = 'pending'")


def upgrade() -> None:
    with op.batch_alter_table("waits") as batch:
        batch.add_column(sa.Column("event", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("event_key", sa.String(length=500), nullable=True))
        batch.add_column(sa.Column("event_id", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("data", _JSON, nullable=True))
    op.create_index(
        "ix_waits_event",
        "waits",
        ["tenant", "event", "event_key"],
        postgresql_where=_PENDING_EVENT,
        sqlite_where=_PENDING_EVENT,
    )
    op.create_table(
        "inbound_events",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=63), server_default="default", nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=500), nullable=False),
        sa.Column("data", _JSON, nullable=True),
        sa.Column("sender", sa.String(length=200), nullable=True),
        sa.Column("resolved", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant", "event_id"),
    )
    op.create_index(
        "ix_inbound_events_match", "inbound_events", ["tenant", "name", "key", "received_at"]
    )
    op.create_index("ix_inbound_events_received", "inbound_events", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_inbound_events_received", table_name="inbound_events")
    op.drop_index("ix_inbound_events_match", table_name="inbound_events")
    op.drop_table("inbound_events")
    op.drop_index("ix_waits_event", table_name="waits")
    with op.batch_alter_table("waits") as batch:
        batch.drop_column("data")
        batch.drop_column("event_id")
        batch.drop_column("event_key")
        batch.drop_column("event")
