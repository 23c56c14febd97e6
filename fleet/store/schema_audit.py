"""The audit log's table: append-only entries of who did what (``fleet.domain.audit``).

Re-exported by ``fleet.store.schema`` (``s.audit_log``).
"""

from __future__ import annotations

from sqlalchemy import Column, Index, String, Table

from fleet.store.schema_types import BigId, JSONType, UTCDateTime, metadata

#: One entry: when, whose tenant (NULL: no tenant's, a refused key), who (a caller's or
#: operator's name, ``cli:<user>``), the action, the object (a resource by digest), from where,
#: how it went, and a few counts. Rows are only inserted, and removed by age by the sweeper.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("tenant", String(63)),
    Column("actor", String(200), nullable=False),
    Column("action", String(64), nullable=False),
    Column("object", String(300)),
    Column("address", String(100)),
    Column("outcome", String(32), nullable=False),
    Column("detail", JSONType, nullable=False, default=dict),
    Index("ix_audit_log_tenant_at", "tenant", "at"),
    Index("ix_audit_log_at", "at"),
)
