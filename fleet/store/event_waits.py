"""Events sent to the fleet and the waits they resolve (``fleet.domain.event_waits`` has the
rules).

An event and a wait for it may be stored at the same moment in two transactions: each takes a
transaction lock on the (tenant, name, key) first (PostgreSQL; SQLite writes one at a time), so
either the event's transaction sees the wait, or the wait's sees the event. None is missed.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleet.domain import event_waits as rules
from fleet.domain import waits
from fleet.domain.keys import SINGLETON_SCOPE
from fleet.domain.values import Task, TaskStatus
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase

t, w, e = s.tasks, s.waits, s.inbound_events


def lock_subject(conn: Connection, tenant: str, name: str, key: str) -> None:
    """Serialize the event and wait writes of one (tenant, name, key) until this commits."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
            {"k": f"fleet-event:{tenant}\x1f{name}\x1f{key}"},
        )


def _in_scope(scope: str | None) -> Any:
    """The tasks an event of ``scope`` reaches (``rules.reaches``)."""
    if scope is None:
        return True
    return t.c.scope.in_(sorted({scope, SINGLETON_SCOPE}))


def _reaching(task_scope: str) -> Any:
    """The events that reach a task of ``task_scope`` (``rules.reaches``)."""
    if task_scope == SINGLETON_SCOPE:
        return True
    return or_(e.c.scope.is_(None), e.c.scope == task_scope)


def due(conn: Connection, task_id: uuid.UUID, now: datetime) -> datetime:
    """When a waiting task is due: now if nothing of it is pending, else its first deadline."""
    pending = conn.execute(
        select(func.count(), func.min(w.c.expires_at)).where(
            w.c.task_id == task_id, w.c.status == "pending"
        )
    ).one()
    return waits.due_at([pending[1]] if pending[1] is not None else [], pending[0], now)


def take_kept(conn: Connection, task: Task, now: datetime, since: datetime) -> None:
    """The run of ``task`` just stored its event waits: each takes the earliest event kept
    since ``since`` that matches it and that no other wait of the task took (in the park's
    transaction)."""
    # (locked in one order, name then key, as every such transaction takes them: no deadlock)
    pending = conn.execute(
        select(w.c.id, w.c.event, w.c.event_key)
        .where(w.c.task_id == task.id, w.c.kind == "event", w.c.status == "pending")
        .order_by(w.c.event, w.c.event_key, w.c.call_id)
    ).all()
    for wait_id, name, key in pending:
        lock_subject(conn, task.tenant, name, key)
        taken = select(w.c.event_id).where(w.c.task_id == task.id, w.c.event_id.is_not(None))
        found = conn.execute(
            select(e.c.event_id, e.c.data, e.c.sender)
            .where(
                e.c.tenant == task.tenant,
                e.c.name == name,
                e.c.key == key,
                e.c.received_at >= since,
                _reaching(task.scope),
                e.c.event_id.not_in(taken),
            )
            .order_by(e.c.received_at, e.c.id)
            .limit(1)
        ).first()
        if found is None:
            continue
        conn.execute(
            update(w)
            .where(w.c.id == wait_id)
            .values(
                status="done",
                event_id=found.event_id,
                data=found.data,
                decided_by=found.sender,
                decided_at=now,
            )
        )
        conn.execute(
            update(e)
            .where(e.c.tenant == task.tenant, e.c.event_id == found.event_id)
            .values(resolved=e.c.resolved + 1)
        )


class EventWaitStore(StoreBase):
    def send_event(self, event: rules.Event) -> tuple[rules.Sent, list[Task]]:
        """Store ``event`` (once per tenant and id) and resolve the waits pending for it (one
        transaction); (what it did, the waiting tasks now due: nothing else of theirs is
        pending). A repeated id changes nothing: the first event is answered."""
        shown = self.redactor.json(event.data)
        now = event.received_at
        insert_ = pg_insert if self.dialect == "postgresql" else sqlite_insert
        with self.tx() as conn:
            lock_subject(conn, event.tenant, event.name, event.key)
            # the id first: a send of the same id under way (of any name and key) commits
            # before this insert goes on, and this one is then a repeat
            stored = conn.execute(
                insert_(e)
                .values(
                    id=uuid.uuid4(),
                    tenant=event.tenant,
                    event_id=event.id,
                    scope=event.scope,
                    name=event.name,
                    key=event.key,
                    data=shown,
                    sender=event.sender,
                    resolved=0,
                    received_at=now,
                )
                .on_conflict_do_nothing(index_elements=["tenant", "event_id"])
                .returning(e.c.id)
            ).first()
            if stored is None:
                seen = conn.execute(
                    select(e).where(e.c.tenant == event.tenant, e.c.event_id == event.id)
                ).one()
                return rules.Sent(_event(seen), seen.resolved, duplicate=True), []
            resolved = (
                conn.execute(
                    update(w)
                    .where(
                        w.c.kind == "event",
                        w.c.status == "pending",
                        w.c.tenant == event.tenant,
                        w.c.event == event.name,
                        w.c.event_key == event.key,
                        w.c.expires_at > now,
                        w.c.task_id.in_(
                            select(t.c.id).where(
                                t.c.status == TaskStatus.WAITING.value, _in_scope(event.scope)
                            )
                        ),
                    )
                    .values(
                        status="done",
                        event_id=event.id,
                        data=shown,
                        decided_by=event.sender,
                        decided_at=now,
                    )
                    .returning(w.c.task_id)
                )
                .scalars()
                .all()
            )
            if resolved:
                conn.execute(update(e).where(e.c.id == stored.id).values(resolved=len(resolved)))
            woken = self._due_now(conn, sorted(set(resolved)), now)
        kept = rules.Event(
            event.id, event.tenant, event.scope, event.name, event.key, shown, now, event.sender
        )
        return rules.Sent(kept, len(resolved), duplicate=False), woken

    def _due_now(self, conn: Connection, task_ids: list[uuid.UUID], now: datetime) -> list[Task]:
        woken = []
        for task_id in task_ids:
            row = conn.execute(
                update(t)
                .where(t.c.id == task_id, t.c.status == TaskStatus.WAITING.value)
                .values(not_before=due(conn, task_id, now))
                .returning(*rows.TASK_COLUMNS)
            ).first()
            if row is not None and row.not_before <= now:
                woken.append(rows.task(row))
        return woken

    def prune_events(self, before: datetime) -> int:
        """Forget events received before ``before`` (past the lookback window and the time
        their ids are remembered)."""
        with self.tx() as conn:
            gone = conn.execute(e.delete().where(e.c.received_at < before))
        return gone.rowcount or 0

    def events_kept(self, tenant: str, name: str, key: str) -> list[rules.Event]:
        """The events of a name and key kept in a tenant, oldest first."""
        with self.read() as conn:
            found = conn.execute(
                select(e)
                .where(and_(e.c.tenant == tenant, e.c.name == name, e.c.key == key))
                .order_by(e.c.received_at, e.c.id)
            ).all()
        return [_event(r) for r in found]


def _event(row: Any) -> rules.Event:
    return rules.Event(
        id=row.event_id,
        tenant=row.tenant,
        scope=row.scope,
        name=row.name,
        key=row.key,
        data=row.data,
        received_at=row.received_at,
        sender=row.sender,
    )


__all__ = ["EventWaitStore", "due", "lock_subject", "take_kept"]
