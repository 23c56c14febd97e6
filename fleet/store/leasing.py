"""Claim, checkpoint and settle: every write of a run is fenced (taking back: ``recovering``).

A write names the task and the fencing number its claim got; after another worker's claim (or a
recovery) the number or the status has moved on and the write matches no row: ``LeaseLost``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleet import release
from fleet.domain import error_classes, journal
from fleet.domain.context import Record
from fleet.domain.quota import ledger_rows
from fleet.domain.runs import InboxItem, Outcome, Signals, TraceRow
from fleet.domain.values import (
    Task,
    TaskStatus,
    render_parts,
    render_stored,
)
from fleet.errors import LeaseLost
from fleet.store import rows
from fleet.store import schema as s
from fleet.store import statements as q
from fleet.store.claims import Chain, Claim, Closing, Head, Prepared, Settled, Started
from fleet.store.hotpath import REPLIED, PgHotPath
from fleet.store.recovering import RecoveryStore
from fleet.store.schema_types import utcnow

t = s.tasks


def _items(records: Any) -> tuple[InboxItem, ...]:
    """Inbox messages as the runner gets them (their parts rendered as text)."""
    return tuple(
        InboxItem(int(r["id"]), str(r["source"]), render_stored(r["input"])) for r in records or ()
    )


def _head(row: Any) -> Head | None:
    return None if row is None else Head(row.id, TaskStatus(row.status), row.not_before, row.fence)


class LeasingStore(RecoveryStore, PgHotPath):
    """Claim, checkpoint and settle (taking tasks back: ``RecoveryStore``)."""

    def start_next(
        self,
        conversation_id: uuid.UUID,
        worker: str,
        now: datetime,
        *,
        history_items: Callable[[str], int],
        prepare: Callable[[Claim], Prepared],
        history_cap: int = 100,
        preread: Head | None = None,
    ) -> Started | Head | None:
        """Claim the conversation's head task and open its run with the context ``prepare`` builds.

        Only the lowest unfinished seq may be claimed, only when due; the claim takes a new
        fencing number and opens the run at once (the task goes from queued to running), and
        the partial unique index refuses a second active task even if two claims raced. Nothing
        claimable: the head (what blocks) or None (nothing unfinished). ``history_cap`` bounds
        the history read for any deployment (``history_items`` gives each one's own limit).
        """
        if self.one_statement_path:
            return self._start_next_pg(
                conversation_id,
                worker,
                now,
                history_items=history_items,
                prepare=prepare,
                history_cap=history_cap,
                preread=preread,
            )
        with self.tx() as conn:
            row = conn.execute(
                q.CLAIM, {"b_conv": conversation_id, "b_now": now, "b_worker": worker}
            ).first()
            if row is None:
                return _head(conn.execute(q.HEAD, {"b_conv": conversation_id}).first())
            task = rows.task(row)
            claim = self._claim_sources(conn, task, row._mapping["generation"], history_items)
            prepared = prepare(claim)
            run_id = uuid.uuid4()
            conn.execute(q.INSERT_RUN, self._run_row(task, run_id, prepared, now, worker))
        return Started(task=task, run_id=run_id, context=prepared.context)

    @staticmethod
    def _run_row(
        task: Task, run_id: uuid.UUID, prepared: Prepared, now: datetime, worker: str
    ) -> dict[str, Any]:
        return {
            "id": run_id,
            "task_id": task.id,
            "conversation_id": task.conversation_id,
            "attempt": task.attempts,
            "fence": task.fence,
            "status": "running",
            "model": prepared.model,
            "context": prepared.context,
            "usage": {},
            "labels": task.labels,
            "started_at": now,
            "worker": worker,
            "release": release.current(),
        }

    def _claim_sources(
        self, conn: Connection, task: Task, generation: int, history_items: Callable[[str], int]
    ) -> Claim:
        if task.attempts > 1:
            frozen = conn.execute(q.FROZEN, {"b_task": task.id}).scalar()
            if frozen is not None:
                return Claim(task=task, frozen_context=frozen)
        limit = history_items(task.deployment)
        if task.seq == 1 or limit == 0:
            return Claim(task=task)  # a conversation's first task has no history yet
        found = conn.execute(
            q.HISTORY,
            {"b_conv": task.conversation_id, "b_gen": generation, "b_limit": limit + 1},
        ).all()
        records = tuple(Record(r.id, r.role, r.content, r.delivery, r.seq) for r in found[:limit])
        return Claim(task=task, history=records, more_history=len(found) > limit)

    def checkpoint(
        self,
        task: Task,
        run_id: uuid.UUID,
        traces: Sequence[TraceRow],
        now: datetime,
        *,
        take_inbox_as: int | None = None,
    ) -> Signals:
        """Store finished steps at a step boundary (the step journal), fenced, and say what the
        run must know: cancel or interrupt requested, inbox messages waiting. With
        ``take_inbox_as`` the waiting messages are taken (delivered into this run) and journaled
        as that step. A tool call journaled as ``started`` gets its result in place."""
        if self.one_statement_path:
            row = self._checkpoint_pg(task, run_id, traces, now, take_inbox_as)
            if row is None:
                raise LeaseLost(f"task {task.id} was taken over (fence {task.fence} is stale)")
            return Signals(
                cancel=bool(row["cancel_requested"]),
                interrupt=bool(row["interrupt_requested"]),
                taken=_items(row["taken"]),
                waiting=int(row["waiting"] or 0),
            )
        with self.tx() as conn:
            fenced = {"b_task": task.id, "b_fence": task.fence, "b_run": run_id}
            found = conn.execute(q.CHECKPOINT, fenced).first()
            if found is None:
                raise LeaseLost(f"task {task.id} was taken over (fence {task.fence} is stale)")
            self._insert_traces(conn, task, run_id, traces)
            taken: tuple[InboxItem, ...] = ()
            if take_inbox_as is not None and found.inbox:
                taken = self._take_inbox(conn, task, run_id, take_inbox_as, now)
        return Signals(
            cancel=bool(found.cancel_requested),
            interrupt=bool(found.interrupt_requested),
            taken=taken,
            waiting=0 if take_inbox_as is not None else int(found.inbox),
        )

    def _take_inbox(
        self, conn: Connection, task: Task, run_id: uuid.UUID, step: int, now: datetime
    ) -> tuple[InboxItem, ...]:
        """SQLite: deliver the task's pending inbox messages into the run, journaled as ``step``."""
        ib = s.run_inbox
        pending = conn.execute(
            select(ib.c.id, ib.c.source, ib.c.input)
            .where(ib.c.task_id == task.id, ib.c.status == "pending")
            .order_by(ib.c.id)
        ).all()
        conn.execute(
            update(ib)
            .where(ib.c.id.in_([p.id for p in pending]))
            .values(status="delivered", run_id=run_id, step=step, delivered_at=now)
        )
        conn.execute(update(t).where(t.c.id == task.id).values(inbox=0))
        records = [{"id": p.id, "source": p.source, "input": p.input} for p in pending]
        journaled = TraceRow(step, "inbox", "inbox", None, records, None, {}, now, 0.0)
        self._insert_traces(conn, task, run_id, [journaled])
        return _items(records)

    def journal(self, task_id: uuid.UUID) -> list[TraceRow]:
        """The step journal a retry of the task replays: the steps of its latest run that
        journaled any (each attempt copies what it replayed, so that one holds them all). When
        that run was handed back at a step boundary, a call it marked as begun never began
        (``journal.never_begun``)."""
        tr, r = s.traces, s.runs
        latest = (
            select(tr.c.run_id)
            .where(tr.c.task_id == task_id)
            .order_by(tr.c.id.desc())
            .limit(1)
            .scalar_subquery()
        )
        with self.read() as conn:
            found = conn.execute(select(tr).where(tr.c.run_id == latest).order_by(tr.c.step)).all()
            ended = conn.execute(select(r.c.status, r.c.error).where(r.c.id == latest)).first()
        entries = [rows.trace(row) for row in found]
        if ended is not None and journal.handed_back(ended.status, ended.error):
            return journal.never_begun(entries)
        return entries

    def cancel_requested(self, task_id: uuid.UUID) -> bool:
        """Was the task asked to stop (a cancel, or an interrupt for a newer message)? Polled
        while a tool runs, so either reaches it; the next commit says which."""
        with self.read() as conn:
            found = conn.execute(
                select(t.c.cancel_requested, t.c.interrupt_requested).where(t.c.id == task_id)
            ).first()
        return found is not None and bool(found.cancel_requested or found.interrupt_requested)

    def stop_requested(self, task_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
        """Those of ``task_ids`` asked to stop (a cancel or an interrupt).

        One read of the active tasks asked to stop, whoever runs them (an index of their own
        holds them, few at any time), kept to ``task_ids`` here: a process with hundreds of
        runs in flight sends no list of ids twice a second.
        """
        if not task_ids:
            return set()
        watched = set(task_ids)
        with self.read() as conn:
            rows = conn.execute(select(t.c.id).where(text(s.STOP_ASKED)))
            return {row.id for row in rows if row.id in watched}

    def settle(
        self,
        task: Task,
        run_id: uuid.UUID,
        outcome: Outcome,
        now: datetime,
        *,
        history_cap: int = 100,
        reserved: tuple[int, int] | None = None,
        chain: Chain | None = None,
    ) -> Settled:
        """Close the run and finish the task in one fenced transaction.

        A cancel requested while the run worked wins over its outcome. A succeeded run appends the
        input and the reply to the conversation; a failed one appends the input only. Returns the
        final status and the conversation's next head (read before the lease is released).

        ``reserved`` are the message ids the task's claim took (``Started.reserved``). With
        ``chain``, PostgreSQL also claims the next task in the same statement when it can: then
        the next is that task's ``Started`` instead of a head. ``push_pending``: an A2A push
        config awaits its delivery's journal (the statement returns it; nothing else is read).
        """
        reply = None if outcome.reply is None else self.redactor.text(outcome.reply)
        error = self.redactor.text(outcome.error) if outcome.error else None
        closing = Closing(
            task=task, run_id=run_id, outcome=outcome, reply=reply, error=error, now=now
        )
        if self.one_statement_path:
            done, left = self._settle_pg(
                closing, history_cap=history_cap, reserved=reserved, chain=chain
            )
        else:
            done, left = self._settle_portable(closing)
        if left and self.requeue_inbox(task.id, now) and not isinstance(done.next, Started):
            # the inbox's messages queued behind
            done = done._replace(next=self.head(task.conversation_id))
        return done

    def _settle_portable(self, closing: Closing) -> tuple[Settled, int]:
        """SQLite: the settle as several statements in one transaction."""
        task, run_id, outcome, now = closing.task, closing.run_id, closing.outcome, closing.now
        reply, error = closing.reply, closing.error
        with self.tx() as conn:
            row = conn.execute(
                q.SETTLE,
                {
                    "b_task": task.id,
                    "b_fence": task.fence,
                    "b_run": run_id,
                    "b_status": outcome.status.value,
                    "b_error": error,
                    "b_error_class": error_classes.of_outcome(outcome),
                    "b_result": None if reply is None else {"reply": reply},
                    "b_now": now,
                },
            ).first()
            if row is None:
                raise LeaseLost(f"task {task.id} was taken over; its outcome is discarded")
            final = TaskStatus(row.status)
            self._insert_traces(conn, task, run_id, outcome.traces)
            conn.execute(
                q.CLOSE_RUN,
                {
                    "b_run": run_id,
                    "b_status": ("interrupted" if final == TaskStatus.SUPERSEDED else final.value),
                    "b_usage": outcome.usage,
                    "b_details": outcome.details,
                    "b_error": "cancelled by request" if final == TaskStatus.CANCELLED else error,
                    "b_now": now,
                },
            )
            if final != TaskStatus.CANCELLED:
                said = [("user", render_parts(task.input), "accepted")]
                said += [("user", self.redactor.text(m), "accepted") for m in outcome.inbox]
                if final in REPLIED and final == outcome.status and reply is not None:
                    said.append(("assistant", reply, outcome.reply_delivery))
                conn.execute(
                    q.INSERT_MESSAGES,
                    [
                        {
                            "conversation_id": task.conversation_id,
                            "generation": row.generation,
                            "task_id": task.id,
                            "run_id": run_id,
                            "role": role,
                            "content": content,
                            "delivery": delivery,
                            "created_at": now,
                        }
                        for role, content, delivery in said
                    ],
                )
            nxt = _head(conn.execute(q.HEAD, {"b_conv": task.conversation_id}).first())
        return Settled(final, nxt, bool(row.push_pending)), int(row.inbox or 0)

    def head(self, conversation_id: uuid.UUID) -> Head | None:
        """The lowest unfinished task of a conversation."""
        with self.read() as conn:
            return _head(conn.execute(q.HEAD, {"b_conv": conversation_id}).first())

    def _insert_traces(
        self, conn: Connection, task: Task, run_id: uuid.UUID, traces: Sequence[TraceRow]
    ) -> None:
        if not traces:
            return
        counted = ledger_rows(traces)
        if counted:  # the token ledger: a model step once, however often it is committed
            insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
            conn.execute(
                insert(s.token_usage)
                .values(
                    [
                        {
                            "run_id": run_id,
                            "step": step,
                            "task_id": task.id,
                            "tenant": task.tenant,
                            "day": day,
                            "tokens": tokens,
                            "cost_micros": cost,
                            "created_at": utcnow(),
                        }
                        for step, day, tokens, cost in counted
                    ]
                )
                .on_conflict_do_nothing(index_elements=["run_id", "step"])
            )
        conn.execute(
            q.UPSERT_TRACES[self.dialect],
            [
                {
                    **self._trace_row(tr),
                    "run_id": run_id,
                    "task_id": task.id,
                    "labels": task.labels,
                    "started_at": tr.started_at,
                }
                for tr in traces
            ],
        )
