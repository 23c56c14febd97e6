"""Bulk jobs, the store's side: which tasks a filter names within a key's walls, the job with its
cursor and counts, and the claim that lets one process run it at a time."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleet.domain import bulk as rules
from fleet.domain.values import Task, TaskStatus
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase

t, b = s.tasks, s.bulk_jobs
#: The most failures a job keeps to show (the counts hold them all).
ERRORS_KEPT = 20


def matching(f: rules.Filter, walls: rules.Walls) -> list[Any]:
    """The conditions of the tasks ``f`` names within ``walls``."""
    where: list[Any] = [t.c.status.in_([st.value for st in f.statuses])]
    if walls.tenants is not None:
        where.append(t.c.tenant.in_(sorted(walls.tenants)))
    if walls.scope is not None:
        where.append(t.c.scope == walls.scope)
    if walls.deployments is not None:
        where.append(t.c.deployment.in_(sorted(walls.deployments)))
    if f.tenant is not None:
        where.append(t.c.tenant == f.tenant)
    if f.deployment is not None:
        where.append(t.c.deployment == f.deployment)
    if f.since is not None:
        where.append(t.c.created_at >= f.since)
    if f.until is not None:
        where.append(t.c.created_at < f.until)
    if f.error_class is not None:
        where.append(t.c.error_class == f.error_class)
    where += [t.c.labels[k].as_string() == v for k, v in sorted(f.labels.items())]
    return where


def _job(row: Any) -> rules.Job:
    m = row._mapping
    cursor = None
    if m["cursor_id"] is not None:
        cursor = (m["cursor_created_at"], m["cursor_id"])
    return rules.Job(
        id=m["id"],
        tenant=m["tenant"],
        owner=m["owner"],
        walls=rules.Walls.of(m["reach"], m["scope"]),
        action=m["action"],
        filter=rules.filter_of(m["filter"]),
        idempotency_key=m["idempotency_key"],
        status=m["status"],
        matched=m["matched"],
        done=m["done"],
        failed=m["failed"],
        errors=list(m["errors"] or []),
        cursor=cursor,
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        finished_at=m["finished_at"],
    )


class BulkStore(StoreBase):
    def count_matching(
        self, f: rules.Filter, walls: rules.Walls, *, sample: int = rules.SAMPLE
    ) -> tuple[int, list[uuid.UUID]]:
        """How many tasks ``f`` names within ``walls``, and the first ``sample`` of them."""
        where = matching(f, walls)
        with self.read() as conn:
            count = conn.execute(select(func.count()).select_from(t).where(*where)).scalar_one()
            ids = conn.execute(
                select(t.c.id).where(*where).order_by(t.c.created_at, t.c.id).limit(sample)
            ).scalars()
            return int(count), list(ids)

    def failure_groups(
        self, walls: rules.Walls, since: datetime
    ) -> list[tuple[str | None, int, datetime]]:
        """The tasks that failed since ``since`` within ``walls``, by error class: (class,
        count, newest), the most first (None: ended under an older release, no class)."""
        f = rules.Filter(statuses=(TaskStatus.FAILED,), since=since)
        with self.read() as conn:
            found = conn.execute(
                select(t.c.error_class, func.count(), func.max(t.c.created_at))
                .where(*matching(f, walls))
                .group_by(t.c.error_class)
                .order_by(func.count().desc(), t.c.error_class)
            ).all()
        return [(c, int(n), newest) for c, n, newest in found]

    def unfinished_groups(self, walls: rules.Walls) -> list[tuple[str, str, int, datetime]]:
        """The unfinished tasks within ``walls`` by deployment and status: (deployment,
        status, count, oldest), the most first."""
        f = rules.Filter(statuses=rules.DEFAULT_STATUSES["cancel"])
        with self.read() as conn:
            found = conn.execute(
                select(t.c.deployment, t.c.status, func.count(), func.min(t.c.created_at))
                .where(*matching(f, walls))
                .group_by(t.c.deployment, t.c.status)
                .order_by(func.count().desc(), t.c.deployment, t.c.status)
            ).all()
        return [(d, st, int(n), oldest) for d, st, n, oldest in found]

    def create_bulk_job(
        self,
        *,
        tenant: str,
        owner: str,
        walls: rules.Walls,
        action: rules.Action,
        f: rules.Filter,
        idempotency_key: str | None,
        now: datetime,
    ) -> tuple[rules.Job, bool]:
        """A new job with how many tasks it matches now; (the job, whether it is new): a
        repeated idempotency key of the owner answers the first job."""
        insert_ = pg_insert if self.dialect == "postgresql" else sqlite_insert
        job_id = uuid.uuid4()
        with self.tx() as conn:
            matched = conn.execute(
                select(func.count())
                .select_from(t)
                .where(*matching(f, walls), t.c.created_at <= now)
            ).scalar_one()
            values = {
                "id": job_id,
                "tenant": tenant,
                "owner": owner,
                "scope": walls.scope,
                "reach": walls.json(),
                "action": action,
                "filter": f.json(),
                "idempotency_key": idempotency_key,
                "status": "running" if matched else "done",
                "matched": matched,
                "done": 0,
                "failed": 0,
                "errors": [],
                "created_at": now,
                "updated_at": now,
                "finished_at": None if matched else now,
            }
            stmt = insert_(b).values(**values)
            if idempotency_key is not None:
                stmt = stmt.on_conflict_do_nothing(index_elements=["owner", "idempotency_key"])
            made = conn.execute(stmt.returning(b.c.id)).first()
            if made is None:
                row = conn.execute(
                    select(b).where(b.c.owner == owner, b.c.idempotency_key == idempotency_key)
                ).one()
                return _job(row), False
            return _job(conn.execute(select(b).where(b.c.id == job_id)).one()), True

    def bulk_job(self, job_id: uuid.UUID) -> rules.Job | None:
        with self.read() as conn:
            row = conn.execute(select(b).where(b.c.id == job_id)).first()
        return None if row is None else _job(row)

    def claim_bulk_job(
        self, now: datetime, until: datetime, job_id: uuid.UUID | None = None
    ) -> rules.Job | None:
        """Hold a running job nobody holds (``job_id``'s, or the oldest) until ``until``."""
        free = and_(
            b.c.status == "running", or_(b.c.claimed_until.is_(None), b.c.claimed_until < now)
        )
        pick = select(b.c.id).where(free).order_by(b.c.created_at).limit(1)
        if job_id is not None:
            pick = pick.where(b.c.id == job_id)
        if self.dialect == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        with self.tx() as conn:
            row = conn.execute(
                update(b)
                .where(b.c.id == pick.scalar_subquery(), free)
                .values(claimed_until=until)
                .returning(*b.c)
            ).first()
        return None if row is None else _job(row)

    def bulk_batch(self, job: rules.Job, limit: int = rules.BATCH) -> list[Task]:
        """The next tasks the job acts on, in creation order after its cursor (tasks created
        after the job, its own retries among them, never)."""
        where = [*matching(job.filter, job.walls), t.c.created_at <= job.created_at]
        if job.cursor is not None:
            where.append(tuple_(t.c.created_at, t.c.id) > tuple_(*job.cursor))
        with self.read() as conn:
            found = conn.execute(
                select(*rows.TASK_COLUMNS)
                .where(*where)
                .order_by(t.c.created_at, t.c.id)
                .limit(limit)
            ).all()
        return [rows.task(r) for r in found]

    def advance_bulk_job(
        self,
        job: rules.Job,
        last: Task | None,
        *,
        done: int,
        failed: Sequence[tuple[uuid.UUID, str]],
        finished: bool,
        now: datetime,
        hold_until: datetime | None,
    ) -> rules.Job:
        """Store a batch's counts and the cursor past its last task; ``finished``: done."""
        errors = [*job.errors, *({"taskId": str(i), "error": why} for i, why in failed)]
        values: dict[str, Any] = {
            "done": b.c.done + done,
            "failed": b.c.failed + len(failed),
            "errors": errors[-ERRORS_KEPT:],
            "updated_at": now,
            "claimed_until": hold_until,
        }
        if last is not None:
            values |= {"cursor_created_at": last.created_at, "cursor_id": last.id}
        if finished:
            values |= {"status": "done", "finished_at": now, "claimed_until": None}
        with self.tx() as conn:
            row = conn.execute(
                update(b).where(b.c.id == job.id).values(**values).returning(*b.c)
            ).one()
        return _job(row)


__all__ = ["BulkStore", "matching"]
