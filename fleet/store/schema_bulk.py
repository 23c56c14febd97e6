"""The table of bulk actions: a retry or cancel of the tasks a filter names, run in batches.

Re-exported by ``fleet.store.schema`` (``s.bulk_jobs``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import Column, Integer, String, Table, UniqueConstraint, Uuid

from fleet.store.schema_types import JSONType, UTCDateTime, metadata, partial_index, stamp, tenant

#: One bulk job (``POST /v1/tasks:bulk``, ``fleet tasks retry|cancel`` with filters): what it
#: acts on (its ``filter`` within its key's walls: ``reach`` tenants, and ``scope`` for a key
#: that is not an operator's), how far it got (``cursor_*``: the last task done, in creation
#: order), its counts. ``running`` until every matched task was acted on (``done``); a worker
#: holds it while ``claimed_until`` is ahead (a lost one's job is taken up by the sweeper).
bulk_jobs = Table(
    "bulk_jobs",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    tenant(),
    # The key's caller (``operator`` for the CLI on the store): a job is its owner's alone.
    Column("owner", String(200), nullable=False),
    Column("scope", String(200)),
    Column("reach", JSONType),
    Column("action", String(16), nullable=False),
    Column("filter", JSONType, nullable=False),
    Column("idempotency_key", String(200)),
    Column("status", String(16), nullable=False, default="running"),
    Column("matched", Integer, nullable=False, default=0),
    Column("done", Integer, nullable=False, default=0),
    Column("failed", Integer, nullable=False, default=0),
    # The last few failures (task id and why), for GetBulkJob.
    Column("errors", JSONType, nullable=False, default=list),
    Column("cursor_created_at", UTCDateTime()),
    Column("cursor_id", Uuid),
    Column("claimed_until", UTCDateTime()),
    stamp("created_at"),
    stamp("updated_at"),
    Column("finished_at", UTCDateTime()),
    UniqueConstraint("owner", "idempotency_key"),
    partial_index("ix_bulk_jobs_running", "claimed_until", where="status = 'running'"),
)
