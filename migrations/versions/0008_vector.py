"""vector search: message embeddings as real[] on PostgreSQL (pgvector casts them to vector)

Revision ID: 0008_vector
Revises: 0007_delegation
Create Date: 2026-11-30 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008_vector"
down_revision: str | None = "0007_delegation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FLOATS = sa.JSON().with_variant(postgresql.ARRAY(postgresql.REAL()), "postgresql")
#: Rows converted per statement when existing embeddings are copied into the new column.
_BATCH = 1000


def upgrade() -> None:
    with op.batch_alter_table("message_embeddings") as batch:
        batch.add_column(sa.Column("embedding", _FLOATS, nullable=True))
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    import numpy as np

    last = 0
    while True:
        rows = bind.execute(
            sa.text(
                "SELECT message_id, vector FROM message_embeddings WHERE message_id > :last "
                "ORDER BY message_id LIMIT :n"
            ),
            {"last": last, "n": _BATCH},
        ).all()
        if not rows:
            break
        bind.execute(
            sa.text("UPDATE message_embeddings SET embedding = :e WHERE message_id = :id"),
            [
                {"id": r[0], "e": np.frombuffer(bytes(r[1]), dtype="<f4").tolist()}
                for r in rows
            ],
        )
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("message_embeddings") as batch:
        batch.drop_column("embedding")
