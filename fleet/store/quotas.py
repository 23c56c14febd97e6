"""Tenants in the store: their tasks neither finished nor running (the queued quota), the token
ledger (budgets), and the figures ``fleet tenants`` and ``GET /v1/tenants`` show."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import date, datetime

from sqlalchemy import Connection, case, func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleet.domain.quota import utc_day
from fleet.domain.values import ACTIVE, CLAIMABLE, TaskStatus
from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.clauses import due_work

t, u = s.tasks, s.token_usage
#: Tasks neither finished nor running (queued, handed back, waiting): what
#: ``max_queued_tasks`` counts.
NOT_RUNNING = tuple(st.value for st in CLAIMABLE)


@dataclass
class TenantFigures:
    """One tenant now: running, queued and waiting tasks, how long the oldest due one waits,
    tokens used today."""

    tenant: str
    running: int = 0
    #: Queued or handed back (a lost worker's, a worker's at shutdown).
    queued: int = 0
    #: Waiting for an approval, a delegate or a time (holding no worker; still counted by
    #: ``max_queued_tasks``).
    waiting: int = 0
    #: The earliest ``not_before`` of its due work (``fleet.store.clauses.due_work``: never a
    #: task held behind a wait).
    oldest_due: datetime | None = None
    tokens_today: int = 0
    #: What today's tokens cost (micros of ``[prices]``' unit; 0 when no model is priced).
    cost_today_micros: int = 0
    #: Conversations with a task running (what ``max_running`` caps).
    conversations_running: int = 0
    by_status: dict[str, int] = field(default_factory=dict)


class QuotaStore(StoreBase):
    def waiting_tasks(self, tenant: str) -> int:
        """The tenant's tasks neither finished nor running (queued, handed back, waiting)."""
        with self.read() as conn:
            return _waiting(conn, tenant)

    def lock_tenant(self, conn: Connection, tenant: str) -> None:
        """Serialize the admissions of one tenant that count its waiting tasks, until the
        transaction ends (PostgreSQL; SQLite has one writer at a time already)."""
        if self.dialect == "postgresql":
            conn.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": f"fleet-tenant:{tenant}"}
            )

    def tokens_used(self, tenant: str, day: date) -> int:
        """Tokens the tenant's runs used on ``day`` (UTC), as the ledger holds them."""
        with self.read() as conn:
            return int(
                conn.execute(
                    select(func.coalesce(func.sum(u.c.tokens), 0)).where(
                        u.c.tenant == tenant, u.c.day == day
                    )
                ).scalar_one()
            )

    def task_tokens(self, task_id: uuid.UUID) -> int:
        """Tokens all runs of a task used."""
        with self.read() as conn:
            return int(
                conn.execute(
                    select(func.coalesce(func.sum(u.c.tokens), 0)).where(u.c.task_id == task_id)
                ).scalar_one()
            )

    def tenant_figures(self, now: datetime) -> dict[str, TenantFigures]:
        """Every tenant with unfinished tasks or tokens used today (UTC, at ``now``): its
        figures now."""
        out: dict[str, TenantFigures] = {}
        unfinished = (*NOT_RUNNING, *(st.value for st in ACTIVE))
        with self.read() as conn:
            rows = conn.execute(
                select(
                    t.c.tenant,
                    t.c.status,
                    func.count(),
                    func.min(case((due_work(t, now), t.c.not_before), else_=None)),
                    func.count(func.distinct(t.c.conversation_id)),
                )
                .where(t.c.status.in_(unfinished))
                .group_by(t.c.tenant, t.c.status)
            ).all()
            used = conn.execute(
                select(u.c.tenant, func.sum(u.c.tokens), func.sum(u.c.cost_micros))
                .where(u.c.day == utc_day(now))
                .group_by(u.c.tenant)
            ).all()
        for tenant, status, count, oldest, conversations in rows:
            f = out.setdefault(tenant, TenantFigures(tenant))
            f.by_status[status] = int(count)
            if oldest is not None and (f.oldest_due is None or oldest < f.oldest_due):
                f.oldest_due = oldest
            if status == TaskStatus.WAITING:
                f.waiting += int(count)
            elif status in NOT_RUNNING:
                f.queued += int(count)
            else:
                f.running += int(count)
                f.conversations_running += int(conversations)
        for tenant, tokens, cost in used:
            f = out.setdefault(tenant, TenantFigures(tenant))
            f.tokens_today, f.cost_today_micros = int(tokens or 0), int(cost or 0)
        return out

    def count_refusal(self, tenant: str, day: date) -> None:
        """Embedded mode: one more refused submission of ``tenant`` on ``day``."""
        r = s.quota_refusals
        insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
        stmt = insert(r).values(day=day, tenant=tenant, count=1)
        with self.tx() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["day", "tenant"], set_={"count": r.c.count + 1}
                )
            )

    def refusals(self, day: date) -> dict[str, int]:
        """Embedded mode: refused submissions per tenant on ``day``."""
        r = s.quota_refusals
        with self.read() as conn:
            found = conn.execute(select(r.c.tenant, r.c.count).where(r.c.day == day)).all()
        return {tenant: int(count) for tenant, count in found}


def _waiting(conn: Connection, tenant: str) -> int:
    return int(
        conn.execute(
            select(func.count()).where(t.c.tenant == tenant, t.c.status.in_(NOT_RUNNING))
        ).scalar_one()
    )


def waiting_in(conn: Connection, tenant: str) -> int:
    """``QuotaStore.waiting_tasks`` inside a transaction (the admission's)."""
    return _waiting(conn, tenant)
