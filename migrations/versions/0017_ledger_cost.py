"""token_usage.cost_micros: what each model step cost, from ``[prices]`` (0 when unpriced), so
a tenant's day shows its cost next to its tokens

Revision ID: 0017_ledger_cost
Revises: 0016_token_ledger
Create Date: 2026-12-09 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_ledger_cost"
down_revision: str | None = "0016_token_ledger"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "token_usage",
        sa.Column("cost_micros", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("token_usage", "cost_micros")
