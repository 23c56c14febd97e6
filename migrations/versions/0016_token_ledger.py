"""token_usage: the token ledger tenants' budgets are counted from (a row per model step);
quota_refusals: embedded mode's count of refused submissions per tenant and day

Revision ID: 0016_token_ledger
Revises: 0015_tenants
Create Date: 2026-12-08 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_token_ledger"
down_revision: str | None = "0015_tenants"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "token_usage",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "step", name="pk_token_usage"),
    )
    op.create_index("ix_token_usage_tenant_day", "token_usage", ["tenant", "day"])
    op.create_index("ix_token_usage_task", "token_usage", ["task_id"])
    op.create_table(
        "quota_refusals",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "tenant", name="pk_quota_refusals"),
    )


def downgrade() -> None:
    op.drop_table("quota_refusals")
    op.drop_index("ix_token_usage_task", table_name="token_usage")
    op.drop_index("ix_token_usage_tenant_day", table_name="token_usage")
    op.drop_table("token_usage")
