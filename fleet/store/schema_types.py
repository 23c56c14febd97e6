"""What every table of the schema shares: the one ``MetaData`` (with its naming convention) and
the column types.

The tables are SQLAlchemy Core ``Table`` objects, not ORM classes: no fleet process imports
``sqlalchemy.orm`` (its mappers cost every worker process memory for nothing).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    String,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, REAL

_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python everywhere; SQLite stores naive UTC text."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use datetime.now(UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONType = JSON().with_variant(JSONB(), "postgresql")
#: 64-bit ids on PostgreSQL; INTEGER PRIMARY KEY (the rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")
#: A vector as PostgreSQL ``real[]`` (pgvector casts it to ``vector``); unused JSON elsewhere.
FloatArray = JSON().with_variant(ARRAY(REAL()), "postgresql")


#: Every table of the store (Alembic's autogenerate and ``check`` compare the database to it).
metadata = MetaData(naming_convention=_NAMING)


def utcnow() -> datetime:
    return datetime.now(UTC)


def partial_index(name: str, *columns: str, where: str, unique: bool = False) -> Index:
    """An index of the rows ``where`` holds, on PostgreSQL and SQLite alike."""
    return Index(
        name,
        *columns,
        unique=unique,
        postgresql_where=text(where),
        sqlite_where=text(where),
    )


def stamp(name: str = "created_at") -> Column[datetime]:
    """A NOT NULL UTC time that defaults to the moment of the insert."""
    return Column(name, UTCDateTime(), nullable=False, default=utcnow)


def tenant(*, primary_key: bool = False) -> Column[str]:
    """The tenant whose wall the row lies within (``default`` when none is named)."""
    return Column(
        "tenant",
        String(63),
        primary_key=primary_key,
        nullable=False,
        default="default",
        server_default="default",
    )
