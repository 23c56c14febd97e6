"""Taking tasks back and finding what to wake: a lost worker's task recovered, a stopping
worker's handed back (fenced, as every write of a run), an ended run's inbox requeued, and the
sweeper's reads of active tasks and due conversations."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update

from fleet.domain import lifecycle
from fleet.domain.values import ACTIVE, CLAIMABLE, TERMINAL, TaskStatus
from fleet.store import rows
from fleet.store import schema as s
from fleet.store import statements as q
from fleet.store.base import StoreBase

t = s.tasks


class RecoveryStore(StoreBase):
    def requeue_inbox(self, task_id: uuid.UUID, now: datetime) -> list[uuid.UUID]:
        """The task's run ended before taking its inbox: each waiting message becomes a task of
        its own, queued in order (an idempotency key now names that task). Returns their ids.

        They join the run's generation: when the conversation was reset since (a reset with
        --cancel-running stopped the run), they are cancelled with the reset's reason instead
        of becoming input of the new generation."""
        ib, ik = s.run_inbox, s.idempotency_keys
        made: list[uuid.UUID] = []
        with self.tx() as conn:
            owner = conn.execute(select(*rows.TASK_COLUMNS).where(t.c.id == task_id)).first()
            if owner is None:
                return made
            task = rows.task(owner)
            # Lock the conversation first, as admission does: a steered message that finds
            # this inbox still full joins it before this reads it, or queues after these.
            generation = conn.execute(
                select(s.conversations.c.generation)
                .where(s.conversations.c.id == task.conversation_id)
                .with_for_update()
            ).scalar_one()
            pending = conn.execute(
                select(ib)
                .where(ib.c.task_id == task_id, ib.c.status == "pending")
                .order_by(ib.c.id)
                .with_for_update()
            ).all()
            ran_in = conn.execute(select(t.c.generation).where(t.c.id == task_id)).scalar_one()
            if lifecycle.inbox_fate(ran_in, generation) == "cancel":
                conn.execute(
                    update(ib)
                    .where(ib.c.task_id == task_id, ib.c.status == "pending")
                    .values(status="cancelled", error=lifecycle.RESET_REASON)
                )
                pending = []
            for msg in pending:
                seq = conn.execute(q.NEXT_SEQ, {"b_conv": task.conversation_id}).scalar_one()
                new_id = uuid.uuid4()
                conn.execute(
                    q.INSERT_TASK,
                    {
                        "id": new_id,
                        "conversation_id": task.conversation_id,
                        "seq": seq,
                        "generation": generation,
                        "deployment": task.deployment,
                        "scope": task.scope,
                        "conversation_key": task.key,
                        "status": TaskStatus.QUEUED.value,
                        "input": msg.input,
                        "input_bytes": msg.input_bytes,
                        "not_before": now,
                        "idempotency_key": msg.idempotency_key,
                        "labels": msg.labels or {},
                        "max_attempts": task.max_attempts,
                        "created_at": now,
                        "caller": msg.caller,
                        "resource_id": task.resource_id,
                        "tenant": task.tenant,
                        "priority": task.priority,
                    },
                )
                conn.execute(
                    update(ib)
                    .where(ib.c.id == msg.id)
                    .values(status="requeued", requeued_task_id=new_id)
                )
                if msg.idempotency_key is not None:
                    conn.execute(
                        update(ik)
                        .where(
                            ik.c.tenant == task.tenant,
                            ik.c.key == msg.idempotency_key,
                            ik.c.task_id == task_id,
                        )
                        .values(task_id=new_id)
                    )
                made.append(new_id)
            conn.execute(update(t).where(t.c.id == task_id).values(inbox=0))
        return made

    def inbox_orphans(self, limit: int = 100) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """(task, conversation) of finished tasks whose inbox still holds messages (a worker
        died between its settle and the requeue): the sweeper requeues them."""
        with self.read() as conn:
            found = conn.execute(
                select(t.c.id, t.c.conversation_id)
                .where(t.c.inbox > 0, q.status_in(t.c.status, TERMINAL))
                .limit(limit)
            ).all()
        return [(r.id, r.conversation_id) for r in found]

    def recover(
        self, task_id: uuid.UUID, fence: int, reason: str, now: datetime
    ) -> TaskStatus | None:
        """Take back a task whose worker was lost: retry it, or fail it after its last attempt.

        Conditioned on ``fence`` and an active status, so it never touches a task that finished
        or was claimed again in the meantime. Returns the new status (None if nothing changed).
        """
        return self._take_back(q.RECOVER, task_id, fence, reason, now)

    def hand_back(
        self, task_id: uuid.UUID, fence: int, reason: str, now: datetime
    ) -> TaskStatus | None:
        """Give a running task back at worker shutdown: its run is closed as interrupted and the
        task waits, claimable at once, to resume from its journal. A hand-back never fails a task
        (the attempt still counts). Fenced like ``recover``."""
        return self._take_back(q.HAND_BACK, task_id, fence, reason, now)

    def _take_back(
        self, statement: Any, task_id: uuid.UUID, fence: int, reason: str, now: datetime
    ) -> TaskStatus | None:
        """``statement`` (``RECOVER`` or ``HAND_BACK``), then the run closed as interrupted, in
        one transaction; the task's new status (None if nothing changed)."""
        params = {"b_task": task_id, "b_fence": fence, "b_reason": reason, "b_now": now}
        with self.tx() as conn:
            status = conn.execute(statement, params).scalar()
            if status is None:
                return None
            conn.execute(q.INTERRUPT_RUN, params)
        return TaskStatus(status)

    def active(self) -> list[tuple[uuid.UUID, uuid.UUID, int, str | None]]:
        """(task, conversation, fence, worker) of every leased or running task."""
        with self.read() as conn:
            found = conn.execute(
                select(t.c.id, t.c.conversation_id, t.c.fence, t.c.worker).where(
                    q.status_in(t.c.status, ACTIVE)
                )
            ).all()
        return [(r.id, r.conversation_id, r.fence, r.worker) for r in found]

    def due_conversations(self, before: datetime, limit: int) -> list[tuple[uuid.UUID, str, int]]:
        """Conversations with claimable work due before ``before`` and no active task: each with
        its tenant and the highest priority of that work (whose turn a wake-up is)."""
        a = s.tasks.alias("a")
        with self.read() as conn:
            found = conn.execute(
                select(t.c.conversation_id, t.c.tenant, func.max(t.c.priority))
                .where(
                    q.status_in(t.c.status, CLAIMABLE),
                    t.c.not_before <= before,
                    ~select(a.c.id)
                    .where(
                        a.c.conversation_id == t.c.conversation_id, q.status_in(a.c.status, ACTIVE)
                    )
                    .exists(),
                )
                .group_by(t.c.conversation_id, t.c.tenant)
                .limit(limit)
            ).all()
        return [(r[0], r[1], int(r[2])) for r in found]
