"""Claim, start, checkpoint, settle and recover: every write of a run is fenced.

A write names the task and the fencing number its claim got; after another worker's claim (or a
recovery) the number or the status has moved on and the write matches no row: ``LeaseLost``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, case, literal, null, select, update

from fleet.domain.context import Record
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import ACTIVE, CLAIMABLE, UNFINISHED, Task, TaskStatus, render_parts
from fleet.errors import LeaseLost
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase

t = s.tasks


@dataclass(frozen=True, slots=True)
class Claim:
    """A task this worker now holds, with what its context is built from."""

    task: Task
    #: Newest-first history records (first attempt, or a retry whose first run never started).
    history: tuple[Record, ...] = ()
    #: More history exists beyond ``history`` (the item limit stopped the query).
    more_history: bool = False
    #: A retry reuses the frozen context of the task's earlier run.
    frozen_context: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Head:
    """A conversation's lowest unfinished task, as the drain loop sees it after release."""

    status: TaskStatus
    not_before: datetime


def _unfinished(conversation_id: uuid.UUID) -> Any:
    return and_(t.c.conversation_id == conversation_id, t.c.status.in_(UNFINISHED))


class LeasingStore(StoreBase):
    def claim(
        self,
        conversation_id: uuid.UUID,
        worker: str,
        now: datetime,
        history_items: Callable[[str], int],
    ) -> Claim | None:
        """Lease the conversation's head task if it is claimable and due (one transaction).

        Only the lowest unfinished seq may be leased; the partial unique index refuses a second
        active task even if two claims raced.
        """
        head_id = (
            select(t.c.id)
            .where(_unfinished(conversation_id))
            .order_by(t.c.seq)
            .limit(1)
            .scalar_subquery()
        )
        with self.tx() as conn:
            row = conn.execute(
                update(t)
                .where(t.c.id == head_id, t.c.status.in_(CLAIMABLE), t.c.not_before <= now)
                .values(
                    status=TaskStatus.LEASED,
                    fence=t.c.fence + 1,
                    attempts=t.c.attempts + 1,
                    leased_at=now,
                    worker=worker,
                )
                .returning(*rows.TASK_COLUMNS)
            ).first()
            if row is None:
                return None
            task = rows.task(row)
            if task.attempts > 1:
                frozen = conn.execute(
                    select(s.runs.c.context)
                    .where(s.runs.c.task_id == task.id)
                    .order_by(s.runs.c.attempt.desc())
                    .limit(1)
                ).scalar()
                if frozen is not None:
                    return Claim(task=task, frozen_context=frozen)
            limit = history_items(task.deployment)
            generation = row._mapping["generation"]
            found = conn.execute(
                select(s.messages.c.id, s.messages.c.role, s.messages.c.content)
                .where(
                    s.messages.c.conversation_id == conversation_id,
                    s.messages.c.generation == generation,
                )
                .order_by(s.messages.c.id.desc())
                .limit(limit + 1)
            ).all()
        records = tuple(Record(r.id, r.role, r.content) for r in found[:limit])
        return Claim(task=task, history=records, more_history=len(found) > limit)

    def start_run(
        self,
        task: Task,
        run_id: uuid.UUID,
        context: dict[str, Any],
        model: str,
        now: datetime,
    ) -> None:
        """Open the run and mark the task running; LeaseLost if another claim moved the fence."""
        with self.tx() as conn:
            moved = conn.execute(
                update(t)
                .where(t.c.id == task.id, t.c.fence == task.fence, t.c.status == TaskStatus.LEASED)
                .values(status=TaskStatus.RUNNING, started_at=now)
            ).rowcount
            if moved != 1:
                raise LeaseLost(f"task {task.id} was taken over before its run started")
            conn.execute(
                s.runs.insert().values(
                    id=run_id,
                    task_id=task.id,
                    conversation_id=task.conversation_id,
                    attempt=task.attempts,
                    fence=task.fence,
                    status="running",
                    model=model,
                    context=self.redactor.json(context),
                    usage={},
                    labels=task.labels,
                    started_at=now,
                )
            )

    def checkpoint(
        self, task: Task, run_id: uuid.UUID, traces: Sequence[TraceRow], now: datetime
    ) -> bool:
        """Store finished steps at a step boundary; returns whether a cancel was requested."""
        with self.tx() as conn:
            cancel = conn.execute(
                update(t)
                .where(t.c.id == task.id, t.c.fence == task.fence, t.c.status == TaskStatus.RUNNING)
                .values(leased_at=t.c.leased_at)
                .returning(t.c.cancel_requested)
            ).scalar()
            if cancel is None:
                raise LeaseLost(f"task {task.id} was taken over (fence {task.fence} is stale)")
            self._insert_traces(conn, task, run_id, traces)
        return bool(cancel)

    def settle(self, task: Task, run_id: uuid.UUID, outcome: Outcome, now: datetime) -> TaskStatus:
        """Close the run and finish the task in one fenced transaction; returns the final status.

        A cancel requested while the run worked wins over its outcome. A succeeded run appends
        the input and the reply to the conversation; a failed one appends the input only.
        """
        result = None if outcome.reply is None else {"reply": self.redactor.text(outcome.reply)}
        status_expr = case(
            (t.c.cancel_requested, TaskStatus.CANCELLED.value), else_=outcome.status.value
        )
        error_expr = case((t.c.cancel_requested, "cancelled by request"), else_=outcome.error)
        with self.tx() as conn:
            row = conn.execute(
                update(t)
                .where(t.c.id == task.id, t.c.fence == task.fence, t.c.status == TaskStatus.RUNNING)
                .values(
                    status=status_expr,
                    error=error_expr,
                    result=case((t.c.cancel_requested, null()), else_=literal(result, s.JSONType)),
                    finished_at=now,
                    worker=None,
                )
                .returning(t.c.status, t.c.generation, t.c.input)
            ).first()
            if row is None:
                raise LeaseLost(f"task {task.id} was taken over; its outcome is discarded")
            final = TaskStatus(row.status)
            self._insert_traces(conn, task, run_id, outcome.traces)
            conn.execute(
                update(s.runs)
                .where(s.runs.c.id == run_id)
                .values(
                    status=final.value,
                    usage=outcome.usage,
                    error=self.redactor.text(outcome.error) if outcome.error else row_error(final),
                    finished_at=now,
                )
            )
            if final != TaskStatus.CANCELLED:
                said = [
                    {"role": "user", "content": render_parts(task.input), "delivery": "accepted"}
                ]
                if final == TaskStatus.SUCCEEDED and result is not None:
                    said.append(
                        {"role": "assistant", "content": result["reply"], "delivery": "sent"}
                    )
                conn.execute(
                    s.messages.insert(),
                    [
                        {
                            **m,
                            "conversation_id": task.conversation_id,
                            "generation": row.generation,
                            "task_id": task.id,
                            "run_id": run_id,
                            "created_at": now,
                        }
                        for m in said
                    ],
                )
        return final

    def recover(
        self, task_id: uuid.UUID, fence: int, reason: str, now: datetime
    ) -> TaskStatus | None:
        """Take back a task whose worker was lost: retry it, or fail it after its last attempt.

        Conditioned on ``fence`` and an active status, so it never touches a task that finished
        or was claimed again in the meantime. Returns the new status (None if nothing changed).
        """
        new_status = case(
            (t.c.cancel_requested, TaskStatus.CANCELLED.value),
            (t.c.attempts >= t.c.max_attempts, TaskStatus.FAILED.value),
            else_=TaskStatus.INTERRUPTED.value,
        )
        terminal = t.c.cancel_requested | (t.c.attempts >= t.c.max_attempts)
        with self.tx() as conn:
            status = conn.execute(
                update(t)
                .where(t.c.id == task_id, t.c.fence == fence, t.c.status.in_(ACTIVE))
                .values(
                    status=new_status,
                    error=case(
                        (t.c.cancel_requested, "cancelled by request"),
                        else_=reason,
                    ),
                    finished_at=case((terminal, now), else_=None),
                    worker=None,
                )
                .returning(t.c.status)
            ).scalar()
            if status is None:
                return None
            conn.execute(
                update(s.runs)
                .where(
                    s.runs.c.task_id == task_id,
                    s.runs.c.fence == fence,
                    s.runs.c.status == "running",
                )
                .values(status="interrupted", error=reason, finished_at=now)
            )
        return TaskStatus(status)

    def head(self, conversation_id: uuid.UUID) -> Head | None:
        """The lowest unfinished task of a conversation (status and when it is due)."""
        with self.read() as conn:
            row = conn.execute(
                select(t.c.status, t.c.not_before)
                .where(_unfinished(conversation_id))
                .order_by(t.c.seq)
                .limit(1)
            ).first()
        return None if row is None else Head(TaskStatus(row.status), row.not_before)

    def active(self) -> list[tuple[uuid.UUID, uuid.UUID, int, str | None]]:
        """(task, conversation, fence, worker) of every leased or running task."""
        with self.read() as conn:
            found = conn.execute(
                select(t.c.id, t.c.conversation_id, t.c.fence, t.c.worker).where(
                    t.c.status.in_(ACTIVE)
                )
            ).all()
        return [(r.id, r.conversation_id, r.fence, r.worker) for r in found]

    def due_conversations(self, before: datetime, limit: int) -> list[uuid.UUID]:
        """Conversations with claimable work due before ``before`` and no active task."""
        a = s.tasks.alias("a")
        with self.read() as conn:
            found = conn.execute(
                select(t.c.conversation_id)
                .where(
                    t.c.status.in_(CLAIMABLE),
                    t.c.not_before <= before,
                    ~select(a.c.id)
                    .where(a.c.conversation_id == t.c.conversation_id, a.c.status.in_(ACTIVE))
                    .exists(),
                )
                .distinct()
                .limit(limit)
            ).all()
        return [r.conversation_id for r in found]

    def _insert_traces(
        self, conn: Connection, task: Task, run_id: uuid.UUID, traces: Sequence[TraceRow]
    ) -> None:
        if not traces:
            return
        conn.execute(
            s.traces.insert(),
            [
                {
                    "run_id": run_id,
                    "task_id": task.id,
                    "step": tr.step,
                    "kind": tr.kind,
                    "name": tr.name,
                    "input": self.redactor.json(tr.input),
                    "output": self.redactor.json(tr.output),
                    "error": self.redactor.text(tr.error) if tr.error else None,
                    "usage": tr.usage,
                    "labels": task.labels,
                    "started_at": tr.started_at,
                    "duration_ms": tr.duration_ms,
                }
                for tr in traces
            ],
        )


def row_error(status: TaskStatus) -> str | None:
    return "cancelled by request" if status == TaskStatus.CANCELLED else None
