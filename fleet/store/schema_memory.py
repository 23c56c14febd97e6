"""Tables of memory: blocks and their versions, notes, embeddings (recall), working memory,
observations; each with the receipts that make a retried tool call apply once.

Re-exported by ``fleet.store.schema`` (``s.notes``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
)

from fleet.store.schema_types import (
    BigId,
    FloatArray,
    JSONType,
    UTCDateTime,
    metadata,
    stamp,
    tenant,
)

#: Durable named text in a namespace; ``version`` bumps on every change.
memory_blocks = Table(
    "memory_blocks",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    # Namespaces are per tenant: one tenant's runs never see another's blocks.
    tenant(),
    Column("namespace", String(100), nullable=False),
    Column("name", String(100), nullable=False),
    Column("title", String(200), nullable=False, default=""),
    Column("description", Text, nullable=False, default=""),
    Column("value", Text, nullable=False, default=""),
    Column("version", Integer, nullable=False, default=0, server_default="0"),
    stamp("created_at"),
    stamp("updated_at"),
    UniqueConstraint("tenant", "namespace", "name"),
)

#: Every value a block has had: who wrote it and when.
memory_block_versions = Table(
    "memory_block_versions",
    metadata,
    Column(
        "block_id",
        Uuid,
        ForeignKey("memory_blocks.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("version", Integer, primary_key=True),
    Column("value", Text, nullable=False),
    # ``user`` for people (``fleet memory set``), ``run:<id>`` for an agent's update.
    Column("author", String(200), nullable=False),
    stamp("created_at"),
    # The tool call that made this version (``<task>:<call>``): a retried call applies once.
    Column("receipt", String(200)),
    UniqueConstraint("block_id", "receipt"),
)

#: Explicitly saved per-conversation text (the memory_* note tools).
notes = Table(
    "notes",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("key", String(128), nullable=False),
    Column("body", Text, nullable=False),
    Column("expires_at", UTCDateTime()),
    stamp("created_at"),
    stamp("updated_at"),
    UniqueConstraint("conversation_id", "key"),
)

#: A receipt for a notes tool call, committed with its edit: a retried call applies once.
#: It keeps what the call answered (metadata only, never the note's body).
note_operations = Table(
    "note_operations",
    metadata,
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("receipt", String(200), primary_key=True),
    Column("op", String(16), nullable=False),
    Column("key", String(128), nullable=False),
    Column("outcome", JSONType, nullable=False, default=dict),
    stamp("created_at"),
)

#: A stored message's embedding (recall): written after the message, off the hot path.
message_embeddings = Table(
    "message_embeddings",
    metadata,
    Column(
        "message_id",
        BigId,
        ForeignKey("messages.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("generation", Integer, nullable=False),
    # Its conversation's tenant: a resource's recall never reaches another tenant's messages.
    tenant(),
    Column("scope", String(200), nullable=False),
    Column("namespace", String(100), nullable=False),
    Column("resource_id", String(200)),
    Column("role", String(16), nullable=False),
    Column("labels", JSONType, nullable=False, default=dict),
    # The embedder that made it (``local:wordllama-256``, ``openai:<model>``).
    Column("model", String(200), nullable=False),
    # float32 values, little-endian.
    Column("vector", LargeBinary, nullable=False),
    # PostgreSQL: the same values as ``real[]``, for pgvector's in-database search (written
    # whether or not the server has pgvector, so enabling it later finds every message);
    # NULL on SQLite, whose sqlite-vec reads ``vector``.
    Column("embedding", FloatArray, nullable=True),
    stamp("created_at"),
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

#: Structured state an agent keeps for a conversation or a resource (working memory).
working_memory = Table(
    "working_memory",
    metadata,
    # ``conversation:<id>`` or ``resource:<namespace>:<scope>:<resource id>``.
    Column("key", String(500), primary_key=True),
    Column("value", JSONType, nullable=False),
    Column("version", Integer, nullable=False, default=0),
    stamp("updated_at"),
    # ``run:<id>`` of the last writer.
    Column("author", String(200), nullable=False),
)

#: A receipt per applied working-memory patch: a retried call applies it once.
working_memory_operations = Table(
    "working_memory_operations",
    metadata,
    Column("receipt", String(200), primary_key=True),
    Column("key", String(500), nullable=False),
    Column("version", Integer, nullable=False),
    stamp("created_at"),
)

#: Older history distilled by a model call: one per range of messages and level.
#:
#: Level 0 (an observation) covers messages ``from_message_id``..``to_message_id``; level 1 (a
#: reflection) condenses level-0 observations covering that span. Journaled by range: asking
#: again for the same range reads this row instead of calling the model.
observations = Table(
    "observations",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        Uuid,
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("generation", Integer, nullable=False),
    Column("level", Integer, nullable=False),
    Column("from_message_id", BigInteger, nullable=False),
    Column("to_message_id", BigInteger, nullable=False),
    Column("text", Text, nullable=False),
    Column("model", String(200), nullable=False),
    Column("tokens", Integer, nullable=False, default=0),
    stamp("created_at"),
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
