"""What waiting tasks wait for: parking a run (fenced), the decisions that end its waits, and
the task made due again when nothing it waits for is pending."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleet.domain import event_waits as ev_rules
from fleet.domain import waits as rules
from fleet.domain.ids import IdPrefix
from fleet.domain.runs import Outcome
from fleet.domain.values import TERMINAL, Task, TaskStatus
from fleet.errors import Conflict, LeaseLost, NotFound
from fleet.store import event_waits, rows
from fleet.store import schema as s
from fleet.store import statements as q
from fleet.store.base import StoreBase
from fleet.store.claims import Head
from fleet.store.statements import status_in

t, w = s.tasks, s.waits


#: A pending wait for a delegated task that has ended.
_ENDED_DELEGATE = (
    w.c.kind == "delegate",
    w.c.status == "pending",
    select(t.c.id).where(t.c.id == w.c.target_task_id, status_in(t.c.status, TERMINAL)).exists(),
)


def _wait(row: Any) -> rules.Wait:
    m = row._mapping
    return rules.Wait(
        id=str(m["id"]),
        task_id=str(m["task_id"]),
        tenant=m["tenant"],
        kind=m["kind"],
        call_id=m["call_id"],
        tool=m["tool"],
        arguments=dict(m["arguments"] or {}),
        redacted=bool(m["redacted"]),
        status=m["status"],
        requested_at=m["requested_at"],
        expires_at=m["expires_at"],
        decided_by=m["decided_by"],
        reason=m["reason"],
        decided_at=m["decided_at"],
        target_task_id=None if m["target_task_id"] is None else str(m["target_task_id"]),
        event=m.get("event"),
        event_key=m.get("event_key"),
        event_id=m.get("event_id"),
        data=m.get("data"),
    )


class WaitStore(StoreBase):
    def park(
        self,
        task: Task,
        run_id: uuid.UUID,
        requests: Sequence[rules.Request],
        outcome: Outcome,
        now: datetime,
        *,
        events_since: datetime | None = None,
    ) -> Head | None:
        """The run stops to wait for ``requests`` (fenced, one transaction): each is stored
        once per tool call, the run is closed as ``waiting`` and the task goes ``waiting``,
        holding no worker, due again at the earliest deadline (or now, when nothing is pending:
        all were decided already, or a cancel or an interrupt came meanwhile, which ends the
        pending approvals). A wait does not use up an attempt. Returns the conversation's head.
        An event wait takes an event kept since ``events_since`` (the lookback window) that
        matches it (``fleet.store.event_waits``). Raises LeaseLost when the run no longer owns
        its task."""
        fenced = {"b_task": task.id, "b_fence": task.fence, "b_run": run_id}
        insert_ = pg_insert if self.dialect == "postgresql" else sqlite_insert
        with self.tx() as conn:
            found = conn.execute(q.CHECKPOINT, fenced).first()
            if found is None:
                raise LeaseLost(f"task {task.id} was taken over (fence {task.fence} is stale)")
            if requests:
                conn.execute(
                    insert_(w)
                    .values([self._request_row(task, r, now) for r in requests])
                    .on_conflict_do_nothing(index_elements=["task_id", "call_id"])
                )
            targets = sorted({uuid.UUID(r.target_task_id) for r in requests if r.target_task_id})
            if targets and self.dialect == "postgresql":
                # Read the delegates' rows locked (shared): a delegate's settle under way
                # finishes first and is seen ended here; one after it waits for this commit, so
                # its release finds the wait. Else a delegate ending between this transaction's
                # look and its commit would find no wait to release, and this one stay pending.
                conn.execute(
                    select(t.c.id).where(t.c.id.in_(targets)).with_for_update(read=True)
                ).all()
            if any(r.kind == "event" for r in requests):
                lookback = ev_rules.DEFAULT_LOOKBACK_S
                since = events_since or now - timedelta(seconds=lookback)
                event_waits.take_kept(conn, task, now, since)
            # a delegate that ended before this wait was stored: nothing to wait for
            conn.execute(
                update(w)
                .where(w.c.task_id == task.id, *_ENDED_DELEGATE)
                .values(status="done", decided_at=now)
            )
            if found.cancel_requested or found.interrupt_requested:
                ended = "cancelled" if found.cancel_requested else "interrupted"
                end_pending(conn, task.id, ended, now)
            conn.execute(
                update(t)
                .where(t.c.id == task.id)
                .values(
                    status=TaskStatus.WAITING.value,
                    worker=None,
                    not_before=self._due(conn, task.id, now),
                    max_attempts=t.c.max_attempts + 1,
                )
            )
            conn.execute(
                q.CLOSE_RUN,
                {
                    "b_run": run_id,
                    "b_status": TaskStatus.WAITING.value,
                    "b_usage": outcome.usage,
                    "b_details": outcome.details,
                    "b_error": None,
                    "b_now": now,
                },
            )
            return _head(conn.execute(q.HEAD, {"b_conv": task.conversation_id}).first())

    def _request_row(self, task: Task, r: rules.Request, now: datetime) -> dict[str, Any]:
        shown = self.redactor.json(r.arguments)
        return {
            "id": uuid.uuid4(),
            "task_id": task.id,
            "tenant": task.tenant,
            "kind": r.kind,
            "call_id": r.call_id,
            "tool": r.tool,
            "arguments": shown,
            "redacted": shown != r.arguments,
            "status": "pending",
            "requested_at": now,
            "expires_at": rules.deadline(now, r.timeout_s),
            "target_task_id": None if r.target_task_id is None else uuid.UUID(r.target_task_id),
            "event": r.event,
            "event_key": r.key,
        }

    _due = staticmethod(event_waits.due)

    # -- reading --------------------------------------------------------------------------------

    def wait_of(self, task_id: uuid.UUID, call_id: str) -> rules.Wait | None:
        """The wait a run asked for at this tool call, if any."""
        with self.read() as conn:
            row = conn.execute(
                select(w).where(w.c.task_id == task_id, w.c.call_id == call_id)
            ).first()
        return None if row is None else _wait(row)

    def waits_of(self, task_id: uuid.UUID, *, pending: bool = False) -> list[rules.Wait]:
        """A task's waits, oldest first (``pending``: only those still waiting)."""
        query = select(w).where(w.c.task_id == task_id)
        if pending:
            query = query.where(w.c.status == "pending")
        with self.read() as conn:
            return [_wait(r) for r in conn.execute(query.order_by(w.c.requested_at, w.c.call_id))]

    def awaited_delegates(self, conversation_id: uuid.UUID) -> list[uuid.UUID]:
        """The delegated tasks the conversation's tasks wait for (pending ``delegate`` waits)."""
        with self.read() as conn:
            return list(
                conn.execute(
                    select(w.c.target_task_id)
                    .join(t, t.c.id == w.c.task_id)
                    .where(
                        t.c.conversation_id == conversation_id,
                        w.c.kind == "delegate",
                        w.c.status == "pending",
                        w.c.target_task_id.is_not(None),
                    )
                    .order_by(w.c.requested_at)
                ).scalars()
            )

    def pending_approvals(
        self,
        *,
        tenants: Collection[str] | None = None,
        scope: str | None = None,
        task_prefix: IdPrefix | None = None,
        limit: int = 100,
    ) -> list[tuple[rules.Wait, Task]]:
        """Approvals waiting for a decision, oldest first, with their tasks (``tenants`` /
        ``scope``: only those; None: every tenant's; ``task_prefix``: only of the tasks whose
        id starts with it)."""
        query = (
            select(w, *[c.label(f"t__{c.name}") for c in rows.TASK_COLUMNS])
            .join(t, t.c.id == w.c.task_id)
            .where(
                w.c.status == "pending",
                w.c.kind == "approval",
                t.c.status == TaskStatus.WAITING.value,
            )
            .order_by(w.c.requested_at, w.c.call_id)
            .limit(limit)
        )
        if tenants is not None:
            query = query.where(w.c.tenant.in_(sorted(tenants)))
        if scope is not None:
            query = query.where(t.c.scope == scope)
        if task_prefix is not None:
            query = query.where(t.c.id.between(*task_prefix.bounds()))
        with self.read() as conn:
            found = conn.execute(query).all()
        out = []
        for row in found:
            m = row._mapping
            task_row = {c.name: m[f"t__{c.name}"] for c in rows.TASK_COLUMNS}
            out.append((_wait(row), rows.task(task_row)))
        return out

    # -- deciding -------------------------------------------------------------------------------

    def decide(
        self,
        task_id: uuid.UUID,
        wait_id: uuid.UUID,
        status: rules.WaitStatus,
        now: datetime,
        *,
        by: str | None,
        reason: str | None,
    ) -> tuple[rules.Wait, bool]:
        """Record a decision on a pending approval of a waiting task (one transaction, the
        task's row locked); (the wait, whether the task is due now: nothing of it is pending
        any more). NotFound for no such approval of the task; Conflict when it was decided,
        expired or the task is not waiting."""
        with self.tx() as conn:
            locked = select(t.c.status).where(t.c.id == task_id)
            if self.dialect == "postgresql":
                locked = locked.with_for_update()
            status_now = conn.execute(locked).scalar()
            row = conn.execute(
                select(w).where(w.c.id == wait_id, w.c.task_id == task_id, w.c.kind == "approval")
            ).first()
            if status_now is None or row is None:
                raise NotFound(f"task {task_id} has no approval {wait_id}", field="approvalId")
            wait = _wait(row)
            if wait.status != "pending":
                by_ = f" by {wait.decided_by}" if wait.decided_by else ""
                raise Conflict(
                    f"approval {wait_id} is {wait.status}{by_} already: a decision is final",
                    field="approvalId",
                )
            if now >= wait.expires_at:
                raise Conflict(
                    f"approval {wait_id} expired at {wait.expires_at.isoformat()}: the run was "
                    "told so when it resumed",
                    field="approvalId",
                )
            if status_now != TaskStatus.WAITING.value:
                raise Conflict(
                    f"task {task_id} is {status_now}, not waiting: its approvals cannot be "
                    "decided now",
                    field="id",
                )
            shown_reason = None if reason is None else self.redactor.text(reason)
            conn.execute(
                update(w)
                .where(w.c.id == wait_id)
                .values(status=status, decided_by=by, reason=shown_reason, decided_at=now)
            )
            due = self._due(conn, task_id, now)
            conn.execute(
                update(t)
                .where(t.c.id == task_id, t.c.status == TaskStatus.WAITING.value)
                .values(not_before=due)
            )
            decided = conn.execute(select(w).where(w.c.id == wait_id)).one()
        return _wait(decided), due <= now

    def release_delegate_waits(
        self, now: datetime, *, target: uuid.UUID | None = None
    ) -> list[Task]:
        """Pending ``delegate`` waits whose task ended (``target``'s, or any: the sweeper's
        look after a worker lost between a settle and this) are ``done``; their waiting tasks
        with nothing else pending are due now. Returns those tasks (to wake)."""
        which = list(_ENDED_DELEGATE)
        if target is not None:
            which.append(w.c.target_task_id == target)
        woken: list[Task] = []
        with self.tx() as conn:
            waiting = conn.execute(
                update(w).where(*which).values(status="done", decided_at=now).returning(w.c.task_id)
            ).scalars()
            for task_id in sorted(set(waiting)):
                row = conn.execute(
                    update(t)
                    .where(t.c.id == task_id, t.c.status == TaskStatus.WAITING.value)
                    .values(not_before=self._due(conn, task_id, now))
                    .returning(*rows.TASK_COLUMNS)
                ).first()
                if row is not None and row.not_before <= now:
                    woken.append(rows.task(row))
        return woken

    def expire_wait(self, wait_id: uuid.UUID, now: datetime) -> None:
        """A pending wait past its deadline: ``expired`` (the resumed run saw it so)."""
        with self.tx() as conn:
            conn.execute(
                update(w)
                .where(w.c.id == wait_id, w.c.status == "pending", w.c.expires_at <= now)
                .values(status="expired", decided_at=now)
            )


def end_pending(conn: Connection, task_id: uuid.UUID, status: str, now: datetime) -> None:
    """End a task's pending waits (``interrupted``, ``cancelled``) in the caller's transaction."""
    conn.execute(
        update(w)
        .where(w.c.task_id == task_id, w.c.status == "pending")
        .values(status=status, decided_at=now)
    )


def _head(row: Any) -> Head | None:
    return None if row is None else Head(row.id, TaskStatus(row.status), row.not_before, row.fence)


__all__ = ["WaitStore", "end_pending"]
