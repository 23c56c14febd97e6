"""run inbox: why a steered message was dropped instead of requeued (its run's conversation
was reset meanwhile)

Revision ID: 0013_inbox_error
Revises: 0012_push_owner
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_inbox_error"
down_revision: str | None = "0012_push_owner"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("run_inbox", sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("run_inbox", "error")
