"""Tables of memory: blocks and their versions, notes, embeddings (recall), working memory,
observations; each with the receipts that make a retried tool call apply once.

Re-exported by ``fleet.store.schema``, which names their Core tables (``s.notes``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import Mapped, mapped_column

from fleet.store.schema_types import Base, BigId, FloatArray, JSONType, utcnow


class MemoryBlock(Base):
    """Durable named text in a namespace; ``version`` bumps on every change."""

    __tablename__ = "memory_blocks"
    __table_args__ = (UniqueConstraint("tenant", "namespace", "name"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    #: Namespaces are per tenant: one tenant's runs never see another's blocks.
    tenant: Mapped[str] = mapped_column(String(63), default="default", server_default="default")
    namespace: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(200), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    value: Mapped[str] = mapped_column(Text, default="")
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryBlockVersion(Base):
    """Every value a block has had: who wrote it and when."""

    __tablename__ = "memory_block_versions"

    block_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("memory_blocks.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    #: ``user`` for people (``fleet memory set``), ``run:<id>`` for an agent's update.
    author: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: The tool call that made this version (``<task>:<call>``): a retried call applies once.
    receipt: Mapped[str | None] = mapped_column(String(200))

    __table_args__ = (UniqueConstraint("block_id", "receipt"),)


class Note(Base):
    """Explicitly saved per-conversation text (the memory_* note tools)."""

    __tablename__ = "notes"
    __table_args__ = (UniqueConstraint("conversation_id", "key"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(String(128))
    body: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class NoteOperation(Base):
    """A receipt for a notes tool call, committed with its edit: a retried call applies once.

    It keeps what the call answered (metadata only, never the note's body).
    """

    __tablename__ = "note_operations"

    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    receipt: Mapped[str] = mapped_column(String(200), primary_key=True)
    op: Mapped[str] = mapped_column(String(16))
    key: Mapped[str] = mapped_column(String(128))
    outcome: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MessageEmbedding(Base):
    """A stored message's embedding (recall): written after the message, off the hot path."""

    __tablename__ = "message_embeddings"
    __table_args__ = (
        Index("ix_message_embeddings_conversation", "conversation_id", "message_id"),
        Index(
            "ix_message_embeddings_resource",
            "tenant",
            "scope",
            "namespace",
            "resource_id",
            "message_id",
        ),
    )

    message_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True
    )
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    generation: Mapped[int] = mapped_column(Integer)
    #: Its conversation's tenant: a resource's recall never reaches another tenant's messages.
    tenant: Mapped[str] = mapped_column(String(63), default="default", server_default="default")
    scope: Mapped[str] = mapped_column(String(200))
    namespace: Mapped[str] = mapped_column(String(100))
    resource_id: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: The embedder that made it (``local:wordllama-256``, ``openai:<model>``).
    model: Mapped[str] = mapped_column(String(200))
    #: float32 values, little-endian.
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    #: PostgreSQL: the same values as ``real[]``, for pgvector's in-database search (written
    #: whether or not the server has pgvector, so enabling it later finds every message);
    #: NULL on SQLite, whose sqlite-vec reads ``vector``.
    embedding: Mapped[list[float] | None] = mapped_column(FloatArray, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WorkingMemory(Base):
    """Structured state an agent keeps for a conversation or a resource (working memory)."""

    __tablename__ = "working_memory"

    #: ``conversation:<id>`` or ``resource:<namespace>:<scope>:<resource id>``.
    key: Mapped[str] = mapped_column(String(500), primary_key=True)
    value: Mapped[Any] = mapped_column(JSONType)
    version: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: ``run:<id>`` of the last writer.
    author: Mapped[str] = mapped_column(String(200))


class WorkingMemoryOperation(Base):
    """A receipt per applied working-memory patch: a retried call applies it once."""

    __tablename__ = "working_memory_operations"

    receipt: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(500))
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Observation(Base):
    """Older history distilled by a model call: one per range of messages and level.

    Level 0 (an observation) covers messages ``from_message_id``..``to_message_id``; level 1 (a
    reflection) condenses level-0 observations covering that span. Journaled by range: asking
    again for the same range reads this row instead of calling the model.
    """

    __tablename__ = "observations"
    __table_args__ = (
        Index(
            "uq_observations_range",
            "conversation_id",
            "generation",
            "level",
            "from_message_id",
            "to_message_id",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    generation: Mapped[int] = mapped_column(Integer)
    level: Mapped[int] = mapped_column(Integer)
    from_message_id: Mapped[int] = mapped_column(BigInteger)
    to_message_id: Mapped[int] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
