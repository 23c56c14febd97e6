"""The table of a person's data erased: what refuses new tasks naming an erased resource.

Re-exported by ``fleet.store.schema`` (``s.resource_tombstones``).
"""

from __future__ import annotations

from sqlalchemy import Column, String, Table

from fleet.store.schema_types import JSONType, UTCDateTime, metadata, tenant

#: An erased resource (``fleet erase --resource``): its id only as a digest
#: (``fleet.domain.rights.digest``: it is often an e-mail address), who erased it and when, how
#: much went (counts per kind), and until when a new task naming it is refused (so a queued
#: webhook does not bring it back). It holds none of the resource's data.
resource_tombstones = Table(
    "resource_tombstones",
    metadata,
    tenant(primary_key=True),
    Column("digest", String(64), primary_key=True),
    Column("erased_at", UTCDateTime(), nullable=False),
    Column("refused_until", UTCDateTime(), nullable=False),
    Column("erased_by", String(200), nullable=False),
    Column("counts", JSONType, nullable=False, default=dict),
)
