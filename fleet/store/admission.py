"""The admission transaction: conversation row lock, seq, create-or-merge, idempotency."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from fleet.domain import admission as policy
from fleet.domain.values import Admission, TaskStatus
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase


class AdmissionStore(StoreBase):
    def admit(self, sub: policy.Submission, now: datetime) -> Admission:
        """Admit ``sub`` in one transaction; concurrent repeats of one key yield one task."""
        for attempt in range(3):
            try:
                with self.tx() as conn:
                    return self._admit(conn, sub, now)
            except IntegrityError:
                # A concurrent submission took the same idempotency key or created the same
                # conversation first; the next attempt sees its committed row.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _admit(self, conn: Connection, sub: policy.Submission, now: datetime) -> Admission:
        if sub.idempotency_key is not None:
            original = conn.execute(
                select(*rows.TASK_COLUMNS)
                .join(s.idempotency_keys, s.idempotency_keys.c.task_id == s.tasks.c.id)
                .where(
                    s.idempotency_keys.c.scope == sub.scope,
                    s.idempotency_keys.c.key == sub.idempotency_key,
                )
            ).first()
            if original is not None:
                task = rows.task(original)
                policy.check_duplicate(task.deployment, sub.deployment, sub.idempotency_key)
                return Admission(task=task, duplicate=True)

        followup = sub.policy.mode == "followup"
        conv_id, last_seq, generation = self._lock_conversation(conn, sub, now, bump=followup)
        parts = [self.redactor.json(p.model_dump()) for p in sub.input]
        row: Any = None
        merged = False
        if not followup:
            newest = conn.execute(
                select(
                    s.tasks.c.id,
                    s.tasks.c.status,
                    s.tasks.c.input_bytes,
                    s.tasks.c.input,
                    s.tasks.c.labels,
                )
                .where(s.tasks.c.conversation_id == conv_id)
                .order_by(s.tasks.c.seq.desc())
                .limit(1)
            ).first()
            head = (
                policy.NewestTask(newest.id, TaskStatus(newest.status), newest.input_bytes)
                if newest is not None
                else None
            )
            decision = policy.decide(sub.policy, head, sub.input_bytes, sub.max_input_bytes, now)
            if isinstance(decision, policy.Merge):
                assert newest is not None
                row = conn.execute(
                    update(s.tasks)
                    .where(s.tasks.c.id == decision.task_id, s.tasks.c.status == "queued")
                    .values(
                        input=[*newest.input, *parts],
                        input_bytes=s.tasks.c.input_bytes + sub.input_bytes,
                        submissions=s.tasks.c.submissions + 1,
                        not_before=decision.not_before,
                        labels={**(newest.labels or {}), **sub.labels},
                    )
                    .returning(*rows.TASK_COLUMNS)
                ).first()
                merged = row is not None
            not_before = decision.not_before
            if row is None:
                last_seq = conn.execute(
                    update(s.conversations)
                    .where(s.conversations.c.id == conv_id)
                    .values(last_seq=s.conversations.c.last_seq + 1)
                    .returning(s.conversations.c.last_seq)
                ).scalar_one()
        else:
            not_before = now
        if row is None:
            row = conn.execute(
                s.tasks.insert()
                .values(
                    id=uuid.uuid4(),
                    conversation_id=conv_id,
                    seq=last_seq,
                    generation=generation,
                    deployment=sub.deployment,
                    scope=sub.scope,
                    conversation_key=sub.key,
                    status="queued",
                    input=parts,
                    input_bytes=sub.input_bytes,
                    not_before=not_before,
                    idempotency_key=sub.idempotency_key,
                    labels=sub.labels,
                    max_attempts=sub.max_attempts,
                    created_at=now,
                )
                .returning(*rows.TASK_COLUMNS)
            ).one()
        task = rows.task(row)
        if sub.idempotency_key is not None:
            conn.execute(
                s.idempotency_keys.insert().values(
                    scope=sub.scope, key=sub.idempotency_key, task_id=task.id, created_at=now
                )
            )
        return Admission(task=task, merged=merged)

    def _lock_conversation(
        self, conn: Connection, sub: policy.Submission, now: datetime, *, bump: bool
    ) -> tuple[uuid.UUID, int, int]:
        """Get or create the conversation row, locking it until commit; optionally take a seq.

        The row lock serializes admissions of one conversation, so seqs commit in order and a
        collect merge never races another admission of the same conversation.
        """
        insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
        step = 1 if bump else 0
        stmt = insert(s.conversations).values(
            id=uuid.uuid4(),
            deployment=sub.deployment,
            scope=sub.scope,
            key=sub.key,
            generation=0,
            last_seq=step,
            created_at=now,
            updated_at=now,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["deployment", "scope", "key"],
            set_={"updated_at": now, "last_seq": s.conversations.c.last_seq + step},
        ).returning(s.conversations.c.id, s.conversations.c.last_seq, s.conversations.c.generation)
        conv_id, last_seq, generation = conn.execute(stmt).one()
        return conv_id, last_seq, generation
