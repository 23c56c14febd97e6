"""Reads for the operator UI: figures per deployment, conversations with their unfinished work,
one conversation's tasks. Every read takes the deployments the operator may see."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select, true

from fleet.constants import DEFAULT_TENANT
from fleet.domain import operator as op
from fleet.domain.events import RunMark
from fleet.domain.values import CLAIMABLE, UNFINISHED, Task, TaskStatus
from fleet.errors import NotFound
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.clauses import due_work, narrowed
from fleet.store.lifecycle import CONVERSATION_FIELDS, StoredConversation

t, c = s.tasks, s.conversations
_FINAL = sorted(st.value for st in TaskStatus if st.terminal)
#: A conversations list holds at most this many.
MAX_LISTED = 500
#: The run columns a ``RunMark`` takes as they are.
_RUN_MARK_FIELDS = tuple(f.name for f in fields(RunMark))


@dataclass(frozen=True, slots=True)
class ConversationFilter:
    deployments: frozenset[str] | None = None
    deployment: str | None = None
    scope: str | None = None
    state: op.State | None = None
    limit: int = 100
    #: Only these tenants' conversations (an operator's reach); None: every tenant's.
    tenants: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Conversation(StoredConversation):
    """A conversation with its newest tasks (seq order)."""

    tasks: tuple[Task, ...]
    tenant: str = DEFAULT_TENANT


class OperatorStore(StoreBase):
    def figures(
        self,
        deployments: list[str],
        now: datetime,
        *,
        tenants: frozenset[str] | None = None,
    ) -> dict[str, op.DeploymentFigures]:
        """Backlog (unfinished tasks, oldest due) and the last hour's outcomes per deployment,
        over ``tenants``' tasks (None: every tenant's)."""
        cutoff = now - timedelta(seconds=op.RECENT_S)
        of = true() if tenants is None else t.c.tenant.in_(sorted(tenants))
        oldest_due = func.min(case((due_work(t, now), t.c.not_before), else_=None))
        backlog = (
            select(t.c.deployment, t.c.status, func.count(), oldest_due)
            .where(t.c.status.in_(UNFINISHED), t.c.deployment.in_(deployments), of)
            .group_by(t.c.deployment, t.c.status)
        )
        recent = (
            select(t.c.deployment, t.c.status, func.count())
            .where(
                t.c.status.in_(_FINAL),
                t.c.finished_at >= cutoff,
                t.c.deployment.in_(deployments),
                of,
            )
            .group_by(t.c.deployment, t.c.status)
        )
        with self.read() as conn:
            waiting = conn.execute(backlog).all()
            finished = conn.execute(recent).all()
        found: dict[str, dict[str, float]] = {d: {} for d in deployments}
        for dep, status, count, oldest in waiting:
            f = found[dep]
            f[status] = f.get(status, 0) + count
            if oldest is not None:  # due work only (never a task held behind a wait)
                due = max(0.0, (now - oldest).total_seconds())
                f["oldest"] = max(f.get("oldest", 0.0), due)
        for dep, status, count in finished:
            f = found[dep]
            f["finished"] = f.get("finished", 0) + count
            if status == TaskStatus.FAILED:
                f["failed"] = f.get("failed", 0) + count
        return {
            dep: op.DeploymentFigures(
                deployment=dep,
                queued=int(f.get("queued", 0)),
                running=int(f.get("running", 0) + f.get("leased", 0)),
                interrupted=int(f.get("interrupted", 0)),
                waiting=int(f.get("waiting", 0)),
                oldest_due_s=f.get("oldest", 0.0),
                finished_recently=int(f.get("finished", 0)),
                failed_recently=int(f.get("failed", 0)),
            )
            for dep, f in found.items()
        }

    def conversations(self, flt: ConversationFilter, now: datetime) -> list[op.ConversationRow]:
        """Every conversation with unfinished work plus the most recently active ones, stuck
        first (``fleet.domain.operator.listing_order``), filtered and cut at ``flt.limit``."""
        claimable = t.c.status.in_(CLAIMABLE)
        waits = t.c.status == TaskStatus.WAITING.value
        pending = (
            select(
                t.c.conversation_id,
                func.sum(case((claimable, 1), else_=0)).label("waiting"),
                func.min(case((due_work(t, now), t.c.not_before), else_=None)).label("oldest_due"),
                func.min(case((waits, t.c.not_before), else_=None)).label("resumes_at"),
                func.sum(case((t.c.status == "interrupted", 1), else_=0)).label("interrupted"),
                func.min(case((t.c.status == "running", t.c.started_at), else_=None)).label(
                    "running_since"
                ),
            )
            .where(
                t.c.status.in_(UNFINISHED),
                true() if flt.tenants is None else t.c.tenant.in_(sorted(flt.tenants)),
            )
            .group_by(t.c.conversation_id)
            .limit(MAX_LISTED)
            .subquery()
        )
        busy = select(c, pending).join(pending, pending.c.conversation_id == c.c.id)
        recent = select(c).order_by(c.c.updated_at.desc()).limit(min(flt.limit, MAX_LISTED))
        busy, recent = (
            narrowed(
                q,
                (c.c.deployment, flt.deployments),
                (c.c.deployment, flt.deployment),
                (c.c.scope, flt.scope),
                (c.c.tenant, flt.tenants),
            )
            for q in (busy, recent)
        )
        with self.read() as conn:
            busy_rows = conn.execute(busy).all()
            recent_rows = conn.execute(recent).all() if flt.state in (None, "idle") else []
        out: dict[uuid.UUID, op.ConversationRow] = {}
        for row in (*busy_rows, *recent_rows):
            m = row._mapping
            if m["id"] in out:
                continue
            p = op.Pending(
                waiting=int(m.get("waiting") or 0),
                oldest_due=_aware(m.get("oldest_due")),
                interrupted=int(m.get("interrupted") or 0),
                running_since=_aware(m.get("running_since")),
                resumes_at=_aware(m.get("resumes_at")),
            )
            st, reason, stuck = op.state(p, now)
            out[m["id"]] = op.ConversationRow(
                m["id"],
                m["deployment"],
                m["scope"],
                m["key"],
                m["updated_at"],
                p,
                st,
                reason,
                stuck,
                m["tenant"],
            )
        listed = sorted(out.values(), key=op.listing_order)
        if flt.state is not None:
            listed = [r for r in listed if r.state == flt.state]
        return listed[: flt.limit]

    def runs_by_task(self, task_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[RunMark]]:
        """The runs of these tasks (without their context), first attempt first."""
        r = s.runs
        cols = [r.c.id, r.c.task_id, r.c.attempt, r.c.status, r.c.model, r.c.worker]
        cols += [r.c.started_at, r.c.finished_at, r.c.error]
        out: dict[uuid.UUID, list[RunMark]] = {tid: [] for tid in task_ids}
        with self.read() as conn:
            for i in range(0, len(task_ids), 500):
                found = conn.execute(
                    select(*cols)
                    .where(r.c.task_id.in_(task_ids[i : i + 500]))
                    .order_by(r.c.attempt)
                ).all()
                for row in found:
                    out[row.task_id].append(_run_mark(row._mapping))
        return out

    def conversation(self, conversation_id: uuid.UUID, *, tasks: int = 200) -> Conversation:
        """The conversation and its newest ``tasks`` tasks in seq order; NotFound otherwise."""
        with self.read() as conn:
            row = conn.execute(select(c).where(c.c.id == conversation_id)).first()
            if row is None:
                raise NotFound(f"no conversation with id {conversation_id}", field="id")
            found = conn.execute(
                select(*rows.TASK_COLUMNS)
                .where(t.c.conversation_id == conversation_id)
                .order_by(t.c.seq.desc())
                .limit(tasks)
            ).all()
        return Conversation(
            **rows.pick(row, CONVERSATION_FIELDS),
            tasks=tuple(rows.task(r) for r in reversed(found)),
        )


def _run_mark(m: Any) -> RunMark:
    return RunMark(**rows.pick(m, _RUN_MARK_FIELDS))


def _aware(value: object) -> datetime | None:
    """Aggregates of timestamps come back as text on SQLite: make them aware datetimes."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
