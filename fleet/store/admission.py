"""The admission transaction: conversation row lock, seq, create-or-merge, idempotency."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from fleet.domain import admission as policy
from fleet.domain import quota
from fleet.domain.values import Admission, Task, TaskStatus
from fleet.errors import QueueFull
from fleet.store import pg, rows
from fleet.store import statements as q
from fleet.store.clauses import named
from fleet.store.delegation import insert_record
from fleet.store.quotas import QuotaStore, waiting_in
from fleet.store.schema import conversation_tombstones as tomb
from fleet.store.waits import end_pending


class AdmissionStore(QuotaStore):
    def admit(self, sub: policy.Submission, now: datetime) -> Admission:
        """Admit ``sub`` in one transaction; concurrent repeats of one key yield one task."""
        single = self.admit_statement(sub, now)
        if single is not None:
            row = self.first(*single)
            assert row is not None  # an INSERT … SELECT from an upsert always returns its row
            return self.admitted(row)
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

    def admit_statement(
        self, sub: policy.Submission, now: datetime
    ) -> tuple[str, dict[str, Any]] | None:
        """The common case's one statement and its parameters (upsert the conversation, take a
        seq, insert; its own transaction); None when ``sub`` needs the admission transaction.

        ``admit`` runs it; so does the API's asynchronous intake (``fleet.api.intake``), on its
        own connections, then maps the row with ``admitted``.
        """
        if not (
            self.one_statement_path
            and sub.policy.mode == "followup"
            and sub.policy.max_queued is None
            and sub.idempotency_key is None
            and sub.delegation is None
            and sub.queued_cap is None
        ):
            return None
        params = {
            "conv_id": uuid.uuid4(),
            "task_id": uuid.uuid4(),
            "deployment": sub.deployment,
            "tenant": sub.tenant,
            "priority": sub.priority,
            "scope": sub.scope,
            "key": sub.key,
            "now": now,
            "input": json.dumps([self.redactor.json(p.model_dump()) for p in sub.input]),
            "input_bytes": sub.input_bytes,
            "labels": json.dumps(self.redactor.json(sub.labels)),
            "max_attempts": sub.max_attempts,
            "caller": sub.caller,
            "resource": sub.resource_id,
        }
        return pg.ADMIT_FOLLOWUP, params

    @staticmethod
    def admitted(row: dict[str, Any]) -> Admission:
        """The admission of ``admit_statement``'s row."""
        return Admission(task=rows.task(row), fresh_after_delete=row["fresh_after"])

    def _steer(
        self,
        conn: Connection,
        sub: policy.Submission,
        task_id: uuid.UUID,
        *,
        conv_id: uuid.UUID,
        parts: list[Any],
        now: datetime,
    ) -> Any:
        """Put the submission into the running task's inbox; None if it is no longer running.

        The task row's ``inbox`` count is raised in the same statement that checks it runs, so a
        settle racing this admission either sees the count (and requeues the message) or makes
        this match nothing (and the submission is queued as a task instead).
        """
        row = conn.execute(q.INBOX_RESERVE, {"b_task": task_id}).first()
        if row is None:
            return None
        conn.execute(
            q.INSERT_INBOX,
            {
                "task_id": task_id,
                "conversation_id": conv_id,
                "source": "steer",
                "input": parts,
                "input_bytes": sub.input_bytes,
                "labels": self.redactor.json(sub.labels),
                "idempotency_key": sub.idempotency_key,
                "caller": sub.caller,
                "status": "pending",
                "created_at": now,
            },
        )
        return row

    @staticmethod
    def _interrupt(conn: Connection, task_id: uuid.UUID, now: datetime) -> uuid.UUID | None:
        """Ask the active task's run to stop; a waiting task is due at once, its pending
        approvals rejected as ``interrupted`` (it resumes and ends as an interrupted run)."""
        asked = conn.execute(q.INTERRUPT, {"b_task": task_id, "b_now": now}).first()
        if asked is None:
            return None
        if asked.status == TaskStatus.WAITING.value:
            end_pending(conn, asked.id, "interrupted", now)
        return asked.id  # type: ignore[no-any-return]

    def _within_quota(self, conn: Connection, sub: policy.Submission) -> None:
        """Refuse a submission over its tenant's ``max_queued_tasks`` (when it may be refused):
        counted under the tenant's lock, so concurrent ones cannot both take the last place."""
        if sub.queued_cap is None:
            return
        self.lock_tenant(conn, sub.tenant)
        refused = quota.queued_refusal(sub.tenant, waiting_in(conn, sub.tenant), sub.queued_cap)
        if refused is not None:
            raise refused

    def _admit(self, conn: Connection, sub: policy.Submission, now: datetime) -> Admission:
        if sub.idempotency_key is not None:
            original = conn.execute(
                q.IDEMPOTENT,
                {
                    "b_tenant": sub.tenant,
                    "b_scope": sub.idempotency_scope,
                    "b_key": sub.idempotency_key,
                },
            ).first()
            if original is not None:
                task = rows.task(original)
                policy.check_duplicate(task.deployment, sub.deployment, sub.idempotency_key)
                return Admission(task=task, duplicate=True)

        self._within_quota(conn, sub)
        followup = sub.policy.mode == "followup" and sub.policy.max_queued is None
        # followup always makes a task, so the upsert takes its seq right away.
        conv_id, last_seq, generation = conn.execute(
            q.UPSERT_CONVERSATION[(self.dialect, followup)],
            {
                "b_id": uuid.uuid4(),
                "b_deployment": sub.deployment,
                "b_tenant": sub.tenant,
                "b_scope": sub.scope,
                "b_key": sub.key,
                "b_now": now,
            },
        ).one()
        parts = [self.redactor.json(p.model_dump()) for p in sub.input]
        row: Any = None
        outcome: dict[str, Any] = {}
        not_before = now
        if not followup:
            newest = conn.execute(q.NEWEST, {"b_conv": conv_id}).first()
            head = (
                policy.NewestTask(
                    newest.id,
                    TaskStatus(newest.status),
                    newest.input_bytes,
                    frozenset(newest.labels or {}),
                    submissions=newest.submissions,
                    created_at=newest.created_at,
                    not_before=newest.not_before,
                )
                if newest is not None
                else None
            )
            b = conn.execute(q.BUSY, {"b_conv": conv_id}).one()
            decision = policy.decide(
                sub.policy,
                head,
                sub.input_bytes,
                sub.max_input_bytes,
                now,
                label_keys=frozenset(sub.labels),
                busy=policy.Busy(
                    active=b.active, queued=b.queued, oldest_queued=b.oldest, draining=b.draining
                ),
            )
            if isinstance(decision, policy.Reject):
                raise QueueFull(
                    f"{decision.reason}; on_full = 'reject': try again once it has run",
                    field="conversationKey",
                )
            if isinstance(decision, policy.Steer):
                row = self._steer(
                    conn, sub, decision.task_id, conv_id=conv_id, parts=parts, now=now
                )
                if row is not None:
                    outcome["delivered_to"] = "run"
                else:  # the run ended meanwhile: the message is queued like a followup
                    decision = policy.Create(not_before=now)
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
                outcome["merged"] = row is not None
            if isinstance(decision, policy.Create):
                not_before = decision.not_before
                if decision.drop is not None:
                    dropped = conn.execute(
                        q.DROP_QUEUED, {"b_task": decision.drop, "b_now": now}
                    ).scalar()
                    outcome["dropped"] = dropped
                if decision.interrupt is not None:
                    outcome["interrupted"] = self._interrupt(conn, decision.interrupt, now)
            elif isinstance(decision, policy.Merge) and row is None:
                not_before = decision.not_before
            if row is None:
                last_seq = conn.execute(q.NEXT_SEQ, {"b_conv": conv_id}).scalar_one()
        created = row is None
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
                    "resource_id": sub.resource_id,
                    "tenant": sub.tenant,
                    "priority": sub.priority,
                },
            ).one()
        task = rows.task(row)
        if sub.idempotency_key is not None:
            conn.execute(
                q.INSERT_IDEMPOTENCY_KEY,
                {
                    "tenant": sub.tenant,
                    "scope": sub.idempotency_scope,
                    "key": sub.idempotency_key,
                    "task_id": task.id,
                    "created_at": now,
                },
            )
        if created and sub.delegation is not None:
            insert_record(conn, task.id, sub.delegation, now, self.redactor.json)
        if created and task.seq == 1:  # a new conversation: was one of its key deleted before?
            outcome["fresh_after_delete"] = conn.execute(
                select(tomb.c.deleted_at).where(
                    *named(tomb, sub.deployment, sub.tenant, sub.scope, sub.key)
                )
            ).scalar()
        return Admission(task=task, **outcome)

    def signal(
        self,
        task_id: uuid.UUID,
        parts: tuple[Any, ...],
        input_bytes: int,
        now: datetime,
        *,
        caller: str | None = None,
        idempotency_key: str | None = None,
    ) -> Task | None:
        """Put a message into a running task's inbox (SignalTask, signal_agent); None if the
        task does not run (the caller is told its status). With ``idempotency_key``, a message
        already put under it is not put again (the task is returned as it is now)."""
        with self.tx() as conn:
            if idempotency_key is not None:
                found = conn.execute(
                    q.INBOX_BY_KEY, {"b_task": task_id, "b_key": idempotency_key}
                ).first()
                if found is not None:
                    return rows.task(found)
            row = conn.execute(q.INBOX_RESERVE, {"b_task": task_id}).first()
            if row is None:
                return None
            task = rows.task(row)
            conn.execute(
                q.INSERT_INBOX,
                {
                    "task_id": task_id,
                    "conversation_id": task.conversation_id,
                    "source": "signal",
                    "input": [self.redactor.json(p.model_dump()) for p in parts],
                    "input_bytes": input_bytes,
                    "labels": {},
                    "idempotency_key": idempotency_key,
                    "caller": caller,
                    "status": "pending",
                    "created_at": now,
                },
            )
        return task
