"""The admission transaction: conversation row lock, seq, create-or-merge, idempotency."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from fleet.domain import admission as policy
from fleet.domain.values import Admission, TaskStatus
from fleet.store import pg, rows
from fleet.store import statements as q
from fleet.store.base import StoreBase


class AdmissionStore(StoreBase):
    def admit(self, sub: policy.Submission, now: datetime) -> Admission:
        """Admit ``sub`` in one transaction; concurrent repeats of one key yield one task."""
        if (
            self.one_statement_path
            and sub.policy.mode == "followup"
            and sub.idempotency_key is None
        ):
            return self._admit_followup_pg(sub, now)
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

    def _admit_followup_pg(self, sub: policy.Submission, now: datetime) -> Admission:
        """The common case in one statement: upsert the conversation, take a seq, insert."""
        params = {
            "conv_id": uuid.uuid4(),
            "task_id": uuid.uuid4(),
            "deployment": sub.deployment,
            "scope": sub.scope,
            "key": sub.key,
            "now": now,
            "input": json.dumps([self.redactor.json(p.model_dump()) for p in sub.input]),
            "input_bytes": sub.input_bytes,
            "labels": json.dumps(self.redactor.json(sub.labels)),
            "max_attempts": sub.max_attempts,
            "caller": sub.caller,
        }
        row = self.first(pg.ADMIT_FOLLOWUP, params)
        assert row is not None  # an INSERT … SELECT from an upsert always returns its row
        return Admission(task=rows.task(row))

    def _admit(self, conn: Connection, sub: policy.Submission, now: datetime) -> Admission:
        if sub.idempotency_key is not None:
            original = conn.execute(
                q.IDEMPOTENT, {"b_scope": sub.idempotency_scope, "b_key": sub.idempotency_key}
            ).first()
            if original is not None:
                task = rows.task(original)
                policy.check_duplicate(task.deployment, sub.deployment, sub.idempotency_key)
                return Admission(task=task, duplicate=True)

        followup = sub.policy.mode == "followup"
        # followup always makes a task, so the upsert takes its seq right away.
        conv_id, last_seq, generation = conn.execute(
            q.UPSERT_CONVERSATION[(self.dialect, followup)],
            {
                "b_id": uuid.uuid4(),
                "b_deployment": sub.deployment,
                "b_scope": sub.scope,
                "b_key": sub.key,
                "b_now": now,
            },
        ).one()
        parts = [self.redactor.json(p.model_dump()) for p in sub.input]
        row: Any = None
        merged = False
        not_before = now
        if not followup:
            newest = conn.execute(q.NEWEST, {"b_conv": conv_id}).first()
            head = (
                policy.NewestTask(
                    newest.id,
                    TaskStatus(newest.status),
                    newest.input_bytes,
                    frozenset(newest.labels or {}),
                )
                if newest is not None
                else None
            )
            decision = policy.decide(
                sub.policy,
                head,
                sub.input_bytes,
                sub.max_input_bytes,
                now,
                label_keys=frozenset(sub.labels),
            )
            not_before = decision.not_before
            if isinstance(decision, policy.Merge) and newest is not None:
                row = conn.execute(
                    q.MERGE,
                    {
                        "b_task": decision.task_id,
                        "b_input": [*newest.input, *parts],
                        "b_bytes": sub.input_bytes,
                        "b_not_before": decision.not_before,
                        "b_labels": self.redactor.json({**(newest.labels or {}), **sub.labels}),
                    },
                ).first()
                merged = row is not None
            if row is None:
                last_seq = conn.execute(q.NEXT_SEQ, {"b_conv": conv_id}).scalar_one()
        if row is None:
            row = conn.execute(
                q.INSERT_TASK,
                {
                    "id": uuid.uuid4(),
                    "conversation_id": conv_id,
                    "seq": last_seq,
                    "generation": generation,
                    "deployment": sub.deployment,
                    "scope": sub.scope,
                    "conversation_key": sub.key,
                    "status": TaskStatus.QUEUED.value,
                    "input": parts,
                    "input_bytes": sub.input_bytes,
                    "not_before": not_before,
                    "idempotency_key": sub.idempotency_key,
                    "labels": self.redactor.json(sub.labels),
                    "max_attempts": sub.max_attempts,
                    "created_at": now,
                    "caller": sub.caller,
                },
            ).one()
        task = rows.task(row)
        if sub.idempotency_key is not None:
            conn.execute(
                q.INSERT_IDEMPOTENCY_KEY,
                {
                    "scope": sub.idempotency_scope,
                    "key": sub.idempotency_key,
                    "task_id": task.id,
                    "created_at": now,
                },
            )
        return Admission(task=task, merged=merged)
