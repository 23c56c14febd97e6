"""PostgreSQL's claim and settle: one statement each, and in a drain one statement per task.

A claim reads the head with its history (or takes the row the previous settle returned), builds
the context, and claims and opens the run in one guarded write. It also reserves the ids of the
messages its settle will store and returns the row of the task after it. With those the worker
knows, before it settles, exactly what the next task's context is built from: the history its
own claim read plus the exchange it is about to store. So the settle can claim the next task in
its own statement (``SETTLE_AND_CLAIM``), guarded on everything that was assumed; when a guard
fails (a cancel won, a merge or a cancel touched the next task, a reset), the settle returns the
next head as before and the next claim reads what it needs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from fleet import release
from fleet.domain import error_classes
from fleet.domain.context import Record
from fleet.domain.quota import ledger_rows
from fleet.domain.runs import TraceRow
from fleet.domain.values import CLAIMABLE, Task, TaskStatus, render_parts
from fleet.errors import LeaseLost
from fleet.store import pg, rows
from fleet.store.base import StoreBase
from fleet.store.claims import Chain, Claim, Closing, Head, Prepared, Settled, Started


def _records(found: list[Any] | None) -> tuple[Record, ...]:
    return tuple(Record(*row) for row in found or [])


def _running(task: Task, now: datetime) -> Task:
    return task.model_copy(
        update={
            "status": TaskStatus.RUNNING,
            "fence": task.fence + 1,
            "attempts": task.attempts + 1,
            "leased_at": now,
            "started_at": task.started_at or now,
        }
    )


#: Outcomes whose reply joins the conversation (a superseded run's report does too).
REPLIED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.SUPERSEDED})


class PgHotPath(StoreBase):
    def _start_next_pg(
        self,
        conversation_id: uuid.UUID,
        worker: str,
        now: datetime,
        *,
        history_items: Callable[[str], int],
        prepare: Callable[[Claim], Prepared],
        history_cap: int,
        preread: Head | None,
    ) -> Started | Head | None:
        """Read the head with its history, build the context, then claim and open in one write.

        The write is conditioned on what was read (the task is still the lowest unfinished one,
        claimable and due, with the same fencing number and the same submissions), so a cancel
        or a collect merge in between makes it match nothing, and the head is read again.
        """
        row = preread.context_row if preread is not None else None
        for _ in range(5):
            if row is None:
                row = self.first(
                    pg.HEAD_WITH_CONTEXT,
                    {"conv": conversation_id, "history": history_cap + 1},
                )
            if row is None:
                return None
            task = rows.task(row)  # also types a pre-read row's JSON values
            head = Head(task.id, task.status, task.not_before, task.fence)
            if not head.claimable or head.not_before > now:
                return head
            found: tuple[Record, ...] | None = None
            if row["frozen"] is not None:
                claim = Claim(task=task, frozen_context=row["frozen"])
            else:
                found = _records(row["history"])
                claim = self._claim_from(task, found, history_items)
            prepared = prepare(claim)
            run_id = uuid.uuid4()
            params = {
                "conv": conversation_id,
                "task": task.id,
                "fence": task.fence,
                "submissions": task.submissions,
                "now": now,
                "worker": worker,
                "release": release.current(),
                "run": run_id,
                "model": prepared.model,
                # Built from stored messages and the stored input: redacted already.
                "context": json.dumps(prepared.context),
            }
            row = None  # a failed claim reads the head again
            claimed = self.first(pg.CLAIM_AND_START, params)
            if claimed is not None:
                return Started(
                    task=_running(task, now),
                    run_id=run_id,
                    context=prepared.context,
                    reserved=(claimed["m1"], claimed["m2"]),
                    found=found,
                    after=claimed["after_row"],
                )
        last = self.first(pg.HEAD_WITH_CONTEXT, {"conv": conversation_id, "history": 0})
        if last is None:
            return None
        return Head(last["id"], TaskStatus(last["status"]), last["not_before"], last["fence"])

    @staticmethod
    def _claim_from(
        task: Task, found: tuple[Record, ...], history_items: Callable[[str], int]
    ) -> Claim:
        """The claim of a first attempt from the newest history read (``history_cap + 1``)."""
        limit = history_items(task.deployment)
        return Claim(task=task, history=found[:limit], more_history=len(found) > limit)

    def _settle_pg(
        self,
        closing: Closing,
        *,
        history_cap: int,
        reserved: tuple[int, int] | None,
        chain: Chain | None,
    ) -> tuple[Settled, int]:
        task, run_id, outcome, now = closing.task, closing.run_id, closing.outcome, closing.now
        reply, error = closing.reply, closing.error
        # Messages the run took from its inbox come after the input; they were not counted in
        # what the claim reserved, so then every id is drawn here, in order, and nothing chains.
        if outcome.inbox:
            reserved = None
            chain = None
        said: list[dict[str, Any]] = [
            {
                "id": reserved[0] if reserved else None,
                "role": "user",
                "content": render_parts(task.input),
                "delivery": "accepted",
                "ord": 0,
                "only_if": None,
            },
            *(
                {
                    "id": None,
                    "role": "user",
                    "content": self.redactor.text(text),
                    "delivery": "accepted",
                    "ord": i,
                    "only_if": None,
                }
                for i, text in enumerate(outcome.inbox, 1)
            ),
        ]
        if reply is not None and outcome.status in REPLIED:
            said.append(
                {
                    "id": reserved[1] if reserved else None,
                    "role": "assistant",
                    "content": reply,
                    "delivery": outcome.reply_delivery,
                    "ord": len(said),
                    "only_if": outcome.status.value,
                }
            )
        params = {
            "task": task.id,
            "fence": task.fence,
            "run": run_id,
            "status": outcome.status.value,
            "error": error,
            "error_class": error_classes.of_outcome(outcome),
            "result": None if reply is None else json.dumps({"reply": reply}),
            "usage": json.dumps(outcome.usage),
            "details": json.dumps(outcome.details),
            "now": now,
            "traces": json.dumps([self._trace_row(tr) for tr in outcome.traces], default=str),
            "ledger": _ledger_json(outcome.traces),
            "messages": json.dumps(said),
            "history": history_cap + 1,
        }
        follow = None
        if chain is not None and reserved is not None and outcome.status != TaskStatus.CANCELLED:
            # (a cancelled run stores nothing: the history the chain assumes would be wrong)
            follow = self._follow(task, chain, said, now, history_cap)
        if follow is None:
            row = self.first(pg.SETTLE, params)
        else:
            row = self.first(pg.SETTLE_AND_CLAIM, {**params, **follow[0]})
        if row is None:
            raise LeaseLost(f"task {task.id} was taken over; its outcome is discarded")
        final, left = TaskStatus(row["status"]), int(row["inbox"] or 0)
        push = bool(row["push_pending"])
        if follow is not None and row["chained_run"] is not None:
            _, nxt, found, prepared = follow
            started = Started(
                task=_running(nxt, now),
                run_id=row["chained_run"],
                context=prepared.context,
                reserved=(row["m1"], row["m2"]),
                found=found,
                after=row["chained_after"],
            )
            return Settled(final, started, push), left
        if row["next_row"] is None:
            return Settled(final, None, push), left
        ahead = {**row["next_row"], "frozen": row["next_frozen"], "history": row["next_history"]}
        head = Head(
            uuid.UUID(ahead["id"]),
            TaskStatus(ahead["status"]),
            datetime.fromisoformat(ahead["not_before"]),
            ahead["fence"],
            context_row=ahead,
        )
        return Settled(final, head, push), left

    def _follow(
        self,
        settled: Task,
        chain: Chain,
        said: list[dict[str, Any]],
        now: datetime,
        history_cap: int,
    ) -> tuple[dict[str, Any], Task, tuple[Record, ...], Prepared] | None:
        """The next task's claim, built as if read after this settle; None if it cannot be."""
        nxt = rows.task(chain.after)
        if (
            nxt.conversation_id != settled.conversation_id
            or nxt.status not in CLAIMABLE
            or nxt.attempts > 0  # a retry: its frozen context is in the store
            or nxt.not_before > now
        ):
            return None
        # What this settle stores if the task ends as the worker says (the statement checks).
        stored = tuple(
            Record(m["id"], m["role"], m["content"], m["delivery"], settled.seq)
            for m in reversed(said)
        )
        found = (stored + chain.found)[: history_cap + 1]
        prepared = chain.prepare(self._claim_from(nxt, found, chain.history_items))
        params = {
            "next_task": nxt.id,
            "next_fence": nxt.fence,
            "next_submissions": nxt.submissions,
            "next_seq": nxt.seq,
            "conv": nxt.conversation_id,
            "seq": settled.seq,
            "next_run": uuid.uuid4(),
            "worker": chain.worker,
            "release": release.current(),
            "model": prepared.model,
            "context": json.dumps(prepared.context),
        }
        return params, nxt, found, prepared

    def _checkpoint_pg(
        self,
        task: Task,
        run_id: uuid.UUID,
        traces: Sequence[TraceRow],
        now: datetime,
        take_inbox_as: int | None,
    ) -> dict[str, Any] | None:
        return self.first(
            pg.CHECKPOINT,
            {
                "task": task.id,
                "fence": task.fence,
                "run": run_id,
                "traces": json.dumps([self._trace_row(tr) for tr in traces], default=str),
                "ledger": _ledger_json(traces),
                "take": take_inbox_as is not None,
                "inbox_step": take_inbox_as,
                "now": now,
            },
        )

    def _trace_row(self, tr: TraceRow) -> dict[str, Any]:
        return {
            "step": tr.step,
            "kind": tr.kind,
            "name": tr.name,
            "input": self.redactor.json(tr.input),
            "output": self.redactor.json(tr.output),
            "error": self.redactor.text(tr.error) if tr.error else None,
            "usage": tr.usage,
            "started_at": tr.started_at.isoformat(),
            "duration_ms": tr.duration_ms,
            "status": tr.status,
            "call_id": tr.call_id,
            "replayed": tr.replayed,
        }


def _ledger_json(traces: Sequence[TraceRow]) -> str:
    """The token ledger's rows of ``traces`` as the hot-path statements take them."""
    return json.dumps(
        [
            {"step": st, "day": day.isoformat(), "tokens": n, "cost_micros": cost}
            for st, day, n, cost in ledger_rows(traces)
        ]
    )
