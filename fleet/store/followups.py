"""Follow-ups agents scheduled (``schedule_followup``): stored once per tool call, at most
``MAX_PENDING`` pending a conversation (counted under its row's lock), read when due."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update

from fleet.domain import followups as rules
from fleet.domain.values import Task
from fleet.errors import Conflict
from fleet.store import schema as s
from fleet.store.base import StoreBase

f = s.followups


def _followup(row: Any) -> rules.Followup:
    m = row._mapping
    return rules.Followup(
        id=str(m["id"]),
        task_id=str(m["task_id"]),
        conversation_id=str(m["conversation_id"]),
        tenant=m["tenant"],
        deployment=m["deployment"],
        scope=m["scope"],
        key=m["conversation_key"],
        input=m["input"],
        due_at=m["due_at"],
        status=m["status"],
        labels=dict(m["labels"] or {}),
        caller=m["caller"],
    )


class FollowupStore(StoreBase):
    def schedule_followup(
        self, task: Task, call_id: str, input: str, due_at: datetime, now: datetime
    ) -> rules.Followup:
        """Store a follow-up of ``task``'s conversation, once per tool call (the one stored
        first comes back); Conflict when the conversation has ``MAX_PENDING`` pending."""
        with self.tx() as conn:
            locked = select(s.conversations.c.id).where(
                s.conversations.c.id == task.conversation_id
            )
            if self.dialect == "postgresql":
                locked = locked.with_for_update()
            conn.execute(locked)
            found = conn.execute(
                select(f).where(f.c.task_id == task.id, f.c.call_id == call_id)
            ).first()
            if found is not None:
                return _followup(found)
            pending = conn.execute(
                select(func.count()).where(
                    f.c.conversation_id == task.conversation_id, f.c.status == "pending"
                )
            ).scalar_one()
            refusal = rules.full_message(int(pending))
            if refusal is not None:
                raise Conflict(refusal, field="input")
            row = conn.execute(
                f.insert()
                .values(
                    id=uuid.uuid4(),
                    task_id=task.id,
                    call_id=call_id,
                    conversation_id=task.conversation_id,
                    tenant=task.tenant,
                    deployment=task.deployment,
                    scope=task.scope,
                    conversation_key=task.key,
                    input=self.redactor.text(input),
                    labels=self.redactor.json(dict(task.labels)),
                    caller=task.caller,
                    due_at=due_at,
                    status="pending",
                    created_at=now,
                )
                .returning(*f.c)
            ).one()
        return _followup(row)

    def due_followups(self, now: datetime, limit: int = 100) -> list[rules.Followup]:
        """Pending follow-ups due by ``now``, soonest first."""
        with self.read() as conn:
            found = conn.execute(
                select(f)
                .where(f.c.status == "pending", f.c.due_at <= now)
                .order_by(f.c.due_at)
                .limit(limit)
            ).all()
        return [_followup(r) for r in found]

    def followups_of(self, conversation_id: uuid.UUID) -> list[rules.Followup]:
        """A conversation's follow-ups, soonest first."""
        with self.read() as conn:
            found = conn.execute(
                select(f).where(f.c.conversation_id == conversation_id).order_by(f.c.due_at)
            ).all()
        return [_followup(r) for r in found]

    def followup_admitted(self, followup_id: uuid.UUID, task_id: uuid.UUID | None) -> None:
        """The follow-up became ``task_id`` (or, None, was dropped: ``cancelled``)."""
        status = "admitted" if task_id is not None else "cancelled"
        with self.tx() as conn:
            conn.execute(
                update(f)
                .where(f.c.id == followup_id, f.c.status == "pending")
                .values(status=status, admitted_task_id=task_id)
            )


__all__ = ["FollowupStore"]
