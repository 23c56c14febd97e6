"""Reads for the CLI and API, and cancel: tasks, runs, traces, conversations, messages."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, case, func, not_, select, update

from fleet.domain.ids import IdPrefix
from fleet.domain.values import (
    ACTIVE,
    CLAIMABLE,
    UNFINISHED,
    Message,
    Run,
    RunDetail,
    Task,
    TaskStatus,
)
from fleet.errors import NotFound
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.clauses import due_work, narrowed
from fleet.store.waits import end_pending

t = s.tasks


@dataclass(frozen=True, slots=True)
class TaskFilter:
    deployment: str | None = None
    scope: str | None = None
    conversation_key: str | None = None
    status: TaskStatus | None = None
    limit: int = 100
    #: Only these deployments (e.g. the ones an API caller may use); None means any.
    deployments: frozenset[str] | None = None
    #: Only tasks in one of these statuses; None means any.
    statuses: frozenset[TaskStatus] | None = None
    #: Only tasks whose status last changed (finished, else started, else created) after this.
    changed_after: datetime | None = None
    #: Only tasks whose id starts with this prefix (``fleet tasks show 67bdb6``).
    id_prefix: IdPrefix | None = None
    #: Only tasks of these tenants (a caller's own, an operator's reach); None means any.
    tenants: frozenset[str] | None = None
    #: ``(True, now)``: only tasks asking a person to decide an approval at ``now`` (waiting,
    #: one pending before its deadline); ``(False, now)``: only tasks that do not (A2A's
    #: ``input-required`` and ``working``).
    asking: tuple[bool, datetime] | None = None


@dataclass(frozen=True, slots=True)
class Backlog:
    """How many tasks of a deployment are in one unfinished status (``/metrics`` gauges)."""

    deployment: str
    status: TaskStatus
    count: int
    #: The earliest ``not_before`` among them that is due work (``clauses.due_work``: how long
    #: the oldest has been due; None for running ones and for those held behind a wait).
    oldest: datetime | None


@dataclass(frozen=True, slots=True)
class CancelResult:
    task: Task
    #: ``cancelled`` (was queued), ``requested`` (running: stops at its next step), ``finished``.
    effect: str


class QueryStore(StoreBase):
    def get_task(self, task_id: uuid.UUID, *, scope: str | None = None) -> Task:
        """The task, or NotFound (also when it lies outside ``scope``)."""
        query = select(*rows.TASK_COLUMNS).where(t.c.id == task_id)
        if scope is not None:
            query = query.where(t.c.scope == scope)
        with self.read() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise NotFound(f"no task with id {task_id}", field="id")
        return rows.task(row)

    def list_tasks(self, flt: TaskFilter) -> list[Task]:
        """The newest ``flt.limit`` matching tasks, oldest first."""
        query = self._filtered(select(*rows.TASK_COLUMNS), flt)
        query = query.order_by(t.c.created_at.desc(), t.c.seq.desc()).limit(flt.limit)
        with self.read() as conn:
            found = conn.execute(query).all()
        return [rows.task(r) for r in reversed(found)]

    def count_tasks(self, flt: TaskFilter) -> int:
        """How many tasks match (``flt.limit`` aside)."""
        with self.read() as conn:
            return int(conn.execute(self._filtered(select(func.count()), flt)).scalar_one())

    @staticmethod
    def _filtered(query: Select[Any], flt: TaskFilter) -> Select[Any]:
        query = narrowed(
            query.select_from(t),
            (t.c.deployment, flt.deployment),
            (t.c.scope, flt.scope),
            (t.c.conversation_key, flt.conversation_key),
            (t.c.status, flt.status),
            (t.c.deployment, flt.deployments),
            (t.c.tenant, flt.tenants),
            (t.c.status, flt.statuses),
        )
        if flt.changed_after is not None:
            changed = func.coalesce(t.c.finished_at, t.c.started_at, t.c.created_at)
            query = query.where(changed > flt.changed_after)
        if flt.id_prefix is not None:
            # A range, not LIKE: the primary key's index serves it on both databases.
            query = query.where(t.c.id.between(*flt.id_prefix.bounds()))
        if flt.asking is not None:
            yes, now = flt.asking
            w = s.waits.c
            asks = and_(
                t.c.status == TaskStatus.WAITING.value,
                select(w.id)
                .where(
                    w.task_id == t.c.id,
                    w.kind == "approval",
                    w.status == "pending",
                    w.expires_at > now,
                )
                .exists(),
            )
            query = query.where(asks if yes else not_(asks))
        return query

    def backlog(self, now: datetime) -> list[Backlog]:
        """Unfinished tasks per deployment and status, with the earliest ``not_before`` of each
        one's due work at ``now``."""
        oldest = func.min(case((due_work(t, now), t.c.not_before), else_=None))
        query = (
            select(t.c.deployment, t.c.status, func.count(), oldest)
            .where(t.c.status.in_(UNFINISHED))
            .group_by(t.c.deployment, t.c.status)
        )
        with self.read() as conn:
            found = conn.execute(query).all()
        return [Backlog(d, TaskStatus(st), int(n), oldest) for d, st, n, oldest in found]

    def cancel(
        self, task_id: uuid.UUID, now: datetime, *, scope: str | None = None
    ) -> CancelResult:
        """Cancel a queued task at once; ask a running one to stop at its next step boundary."""
        self.get_task(task_id, scope=scope)
        with self.tx() as conn:
            row = conn.execute(
                update(t)
                .where(t.c.id == task_id, t.c.status.in_(CLAIMABLE))
                .values(
                    status=TaskStatus.CANCELLED,
                    error="cancelled by request",
                    error_class="cancelled",
                    finished_at=now,
                )
                .returning(*rows.TASK_COLUMNS)
            ).first()
            if row is not None:  # (a waiting task's pending waits end with it)
                end_pending(conn, task_id, "cancelled", now)
                return CancelResult(rows.task(row), "cancelled")
            row = conn.execute(
                update(t)
                .where(t.c.id == task_id, t.c.status.in_(ACTIVE))
                .values(cancel_requested=True)
                .returning(*rows.TASK_COLUMNS)
            ).first()
            if row is not None:
                return CancelResult(rows.task(row), "requested")
        return CancelResult(self.get_task(task_id), "finished")

    def runs_of(self, task_id: uuid.UUID) -> list[Run]:
        with self.read() as conn:
            found = conn.execute(
                select(s.runs).where(s.runs.c.task_id == task_id).order_by(s.runs.c.attempt)
            ).all()
        return [rows.run(r) for r in found]

    def list_runs(self, task_id: uuid.UUID, *, scope: str | None = None) -> list[Run]:
        """The task's runs, first attempt first; NotFound if the task is not in ``scope``."""
        self.get_task(task_id, scope=scope)
        r = s.runs.c
        with self.read() as conn:
            found = conn.execute(
                select(s.runs).where(r.task_id == task_id).order_by(r.attempt, r.started_at)
            ).all()
        return [rows.run(row) for row in found]

    def get_run(self, run_id: uuid.UUID, *, scope: str | None = None) -> RunDetail:
        """The run with its steps in step order; NotFound also when its task is not in ``scope``."""
        r, tr = s.runs.c, s.traces.c
        query = select(s.runs).where(r.id == run_id)
        if scope is not None:
            query = query.join(t, t.c.id == r.task_id).where(t.c.scope == scope)
        with self.read() as conn:
            row = conn.execute(query).first()
            if row is None:
                raise NotFound(f"no run with id {run_id}", field="id")
            steps = conn.execute(
                select(s.traces).where(tr.run_id == run_id).order_by(tr.step)
            ).all()
        return RunDetail(run=rows.run(row), steps=tuple(rows.step(x) for x in steps))

    def traces_of(self, task_id: uuid.UUID) -> list[dict[str, Any]]:
        with self.read() as conn:
            found = conn.execute(
                select(s.traces).where(s.traces.c.task_id == task_id).order_by(s.traces.c.id)
            ).all()
        return [dict(r._mapping) for r in found]

    def find_conversation(
        self, deployment: str, scope: str, key: str, *, tenant: str
    ) -> uuid.UUID | None:
        """The tenant's conversation's id, or None; creates nothing."""
        c = s.conversations.c
        with self.read() as conn:
            found: uuid.UUID | None = conn.execute(
                select(c.id).where(
                    c.deployment == deployment, c.tenant == tenant, c.scope == scope, c.key == key
                )
            ).scalar()
        return found

    def messages(self, conversation_id: uuid.UUID, *, limit: int = 100) -> list[Message]:
        """The conversation's newest ``limit`` messages of its current generation, oldest first."""
        m, c = s.messages.c, s.conversations.c
        generation = select(c.generation).where(c.id == conversation_id).scalar_subquery()
        with self.read() as conn:
            found = conn.execute(
                select(s.messages)
                .where(m.conversation_id == conversation_id, m.generation == generation)
                .order_by(m.id.desc())
                .limit(limit)
            ).all()
        return [rows.message(r) for r in reversed(found)]
