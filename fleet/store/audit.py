"""The audit log in the store: append an entry, list them within a reach, remove old ones."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, delete, insert, or_, select

from fleet.domain.audit import MAX_LISTED, Entry
from fleet.store import schema as s
from fleet.store.base import StoreBase

a = s.audit_log

#: Entries one sweep removes at most per batch (it goes on next time).
PRUNE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which entries: ``tenants`` a key reaches (None: all, with the tenantless ones)."""

    tenants: frozenset[str] | None = None
    tenant: str | None = None
    action: str | None = None
    actor: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class Recorded:
    """An entry as stored (with its id)."""

    id: int
    entry: Entry


class AuditStore(StoreBase):
    def record(self, entry: Entry) -> None:
        """Append one entry (its own transaction: the action's outcome is already known)."""
        with self.tx() as conn:
            conn.execute(insert(a).values(**asdict(entry)))

    def audit_entries(self, flt: AuditFilter) -> list[Recorded]:
        """Newest first."""
        where: list[ColumnElement[bool]] = []
        if flt.tenants is not None:
            where.append(a.c.tenant.in_(sorted(flt.tenants)))
        if flt.tenant is not None:
            where.append(a.c.tenant == flt.tenant)
        if flt.action is not None:
            where.append(or_(a.c.action == flt.action, a.c.action.startswith(f"{flt.action}.")))
        if flt.actor is not None:
            where.append(a.c.actor == flt.actor)
        if flt.since is not None:
            where.append(a.c.at >= flt.since)
        if flt.until is not None:
            where.append(a.c.at < flt.until)
        if flt.before_id is not None:
            where.append(a.c.id < flt.before_id)
        limit = max(1, min(flt.limit, MAX_LISTED))
        with self.read() as conn:
            rows = conn.execute(select(a).where(*where).order_by(a.c.id.desc()).limit(limit)).all()
        return [
            Recorded(
                r.id,
                Entry(
                    at=r.at,
                    actor=r.actor,
                    action=r.action,
                    outcome=r.outcome,
                    tenant=r.tenant,
                    object=r.object,
                    address=r.address,
                    detail=dict(r.detail or {}),
                ),
            )
            for r in rows
        ]

    def prune_audit(self, before: datetime, batch: int = PRUNE_BATCH) -> int:
        """Remove at most ``batch`` entries older than ``before``; how many went."""
        with self.tx() as conn:
            ids = select(a.c.id).where(a.c.at < before).order_by(a.c.id).limit(batch)
            return int(conn.execute(delete(a).where(a.c.id.in_(ids))).rowcount or 0)
