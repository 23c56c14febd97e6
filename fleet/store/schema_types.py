"""What every table of the schema shares: the declarative base, naming and column types."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, REAL
from sqlalchemy.orm import DeclarativeBase

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


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=_NAMING)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSONType}


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
